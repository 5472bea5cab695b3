// A deliberately naive planner for tests: tries every ring order and every division of the
// blocks, with the cost model written out again from the formulas (bandwidth tier), so
// the real planner is checked against arithmetic it does not share.
import type { Fleet } from '../fleet.js';

export interface BruteForceResult {
  /** Smallest bottleneck (ms) over all orders and divisions that fit; null when none fits. */
  bottleneckMs: number | null;
  /** Per head device index: the smallest bottleneck with that device holding the head. */
  byHead: Array<number | null>;
}

export function* compositions(total: number, parts: number): Generator<number[]> {
  if (parts === 1) {
    if (total >= 1) yield [total];
    return;
  }
  for (let first = 1; first <= total - (parts - 1); first++) {
    for (const rest of compositions(total - first, parts - 1)) yield [first, ...rest];
  }
}

export function* permutations(xs: readonly number[]): Generator<number[]> {
  if (xs.length <= 1) {
    yield [...xs];
    return;
  }
  for (let i = 0; i < xs.length; i++) {
    const rest = [...xs.slice(0, i), ...xs.slice(i + 1)];
    for (const p of permutations(rest)) yield [xs[i] as number, ...p];
  }
}

/**
 * Bandwidth-tier stage time from the issues' formulas: the fixed step plus the packed bytes read
 * at the device's bandwidth; a measured block_ms replaces the blocks' part and prices the head by
 * its bytes over a block's.
 */
export function bruteStageMs(fleet: Fleet, device: number, blocks: number, head: boolean): number {
  const d = fleet.devices[device];
  if (d === undefined) throw new Error('no such device');
  const m = fleet.model;
  const gbps = d.bandwidthGBps;
  const blockRead = m.blockResidentBytes ?? m.blockBytes;
  const headRead = m.headReadBytes ?? m.headBytes;
  const blocksMs = d.blockMs !== undefined ? blocks * d.blockMs : ((blocks * blockRead) / ((gbps as number) * 1e9)) * 1000;
  const headMs = !head ? 0 : d.blockMs !== undefined ? d.blockMs * (headRead / blockRead) : (headRead / ((gbps as number) * 1e9)) * 1000;
  return (d.stepMs ?? 0) + blocksMs + headMs;
}

export function bruteStageMemory(fleet: Fleet, blocks: number, head: boolean): number {
  const m = fleet.model;
  return blocks * (m.blockBytes + m.kvBytesPerTokenPerLayer * fleet.context * fleet.concurrency) + (head ? m.headResidentBytes : 0);
}

export function bruteForce(fleet: Fleet): BruteForceResult {
  const n = fleet.devices.length;
  const byHead: Array<number | null> = fleet.devices.map(() => null);
  for (const order of permutations(fleet.devices.map((_, i) => i))) {
    for (const counts of compositions(fleet.model.layers, n)) {
      let bottleneck = 0;
      let fits = true;
      order.forEach((device, i) => {
        const head = i === 0;
        const blocks = counts[i] as number;
        if (bruteStageMemory(fleet, blocks, head) > (fleet.devices[device]?.memoryBytes as number)) fits = false;
        bottleneck = Math.max(bottleneck, bruteStageMs(fleet, device, blocks, head));
      });
      if (!fits) continue;
      const h = order[0] as number;
      const cur = byHead[h];
      if (cur === null || cur === undefined || bottleneck < cur) byHead[h] = bottleneck;
    }
  }
  const feasible = byHead.filter((b): b is number => b !== null);
  return { bottleneckMs: feasible.length > 0 ? Math.min(...feasible) : null, byHead };
}
