// The divisions Kiwi is measured against (Kafila §VII): GPipe's uniform split and exo's
// memory-proportional split, both with the head on the first device of the ring. Pure.

/** Equal block counts in ring order; the first `layers mod m` devices take one more. */
export function uniformCounts(layers: number, devices: number): number[] {
  const base = Math.floor(layers / devices);
  const extra = layers % devices;
  return Array.from({ length: devices }, (_, i) => base + (i < extra ? 1 : 0));
}

/**
 * Blocks in proportion to memory by the largest-remainder method (exact integers summing to
 * `layers`). Every device keeps at least one block, the session rule Kiwi's plans obey too, so the
 * comparison is between divisions that all use every admitted device.
 */
export function proportionalCounts(layers: number, memoryBytes: readonly number[]): number[] {
  const m = memoryBytes.length;
  if (layers < m) throw new Error('bug: fewer blocks than devices');
  const total = memoryBytes.reduce((a, b) => a + b, 0);
  const quotas = memoryBytes.map((mem) => (total > 0 ? (layers * mem) / total : layers / m));
  const counts = quotas.map((q) => Math.max(1, Math.floor(q)));
  const remainder = (i: number): number => (quotas[i] as number) - Math.floor(quotas[i] as number);
  let placed = counts.reduce((a, b) => a + b, 0);
  // Largest remainders first (ties: earlier device); when raising to one block overshot, take
  // back from the smallest remainders among devices holding more than one.
  const byRemainder = counts.map((_, i) => i).sort((a, b) => remainder(b) - remainder(a) || a - b);
  for (let k = 0; placed < layers; k = (k + 1) % m) {
    const i = byRemainder[k] as number;
    counts[i] = (counts[i] as number) + 1;
    placed++;
  }
  for (let k = m - 1; placed > layers; k = (k - 1 + m) % m) {
    const i = byRemainder[k] as number;
    if ((counts[i] as number) > 1) {
      counts[i] = (counts[i] as number) - 1;
      placed--;
    }
  }
  return counts;
}
