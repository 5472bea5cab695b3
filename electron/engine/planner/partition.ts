// Exact block division for a fixed chain of devices (Kafila §V-C, chain-on-chain partitioning):
// the smallest bottleneck among the candidate stage costs that a left-to-right pass can meet
// within every device's memory, each device holding at least one block. Pure.
import { costCapacityBlocks, memoryCapacityBlocks, stageCost, type DeviceCost } from './cost-model.js';

export interface Partition {
  /** Blocks per device, in chain order; the device at index 0 holds blocks [0, counts[0]). */
  counts: number[];
  bottleneck: number;
}

/**
 * Divides `layers` identical blocks over the chain `costs` (the head, if any, is `costs[headIndex]`).
 * Returns null when no division gives every device ≥ 1 block within its memory.
 */
export function partitionChain(costs: readonly DeviceCost[], layers: number, headIndex: number | null): Partition | null {
  const m = costs.length;
  if (m === 0 || layers < m) return null;
  const maxPerDevice = layers - (m - 1);
  const memCaps = costs.map((c, i) => Math.min(memoryCapacityBlocks(c, i === headIndex), maxPerDevice));
  if (memCaps.some((cap) => cap < 1) || sum(memCaps) < layers) return null;

  // The optimal bottleneck is the cost of some stage: one of at most m × (layers − m + 1) values.
  const candidates: number[] = [];
  costs.forEach((c, i) => {
    for (let k = 1; k <= (memCaps[i] ?? 0); k++) candidates.push(stageCost(c, k, i === headIndex));
  });
  candidates.sort((a, b) => a - b);

  const capsAt = (bound: number): number[] =>
    costs.map((c, i) => Math.min(memCaps[i] ?? 0, costCapacityBlocks(c, i === headIndex, bound, maxPerDevice)));
  const feasible = (bound: number): boolean => {
    // Left-to-right pass: each device takes the most it can while leaving one block for each
    // device after it; feasible exactly when every device can take one and all blocks are placed.
    const caps = capsAt(bound);
    return caps.every((cap) => cap >= 1) && sum(caps) >= layers;
  };

  // The largest candidate is feasible: at that bound only memory limits the caps, checked above.
  let lo = 0;
  let hi = candidates.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (feasible(candidates[mid] as number)) hi = mid;
    else lo = mid + 1;
  }
  const bound = candidates[lo] as number;
  const caps = capsAt(bound);

  // Among the divisions meeting the optimal bottleneck, prefer the one with the shortest circuit:
  // after one block each, give the rest to the devices with the cheapest blocks first (costs are
  // linear in blocks, so this greedy choice minimises the sum of stage costs).
  const counts: number[] = costs.map(() => 1);
  let left = layers - m;
  const byCost = costs.map((c, i) => ({ i, perBlock: c.perBlock })).sort((a, b) => a.perBlock - b.perBlock || a.i - b.i);
  for (const { i } of byCost) {
    if (left === 0) break;
    const take = Math.min(left, (caps[i] ?? 0) - 1);
    counts[i] = (counts[i] ?? 0) + take;
    left -= take;
  }
  if (left !== 0) throw new Error('bug: a feasible bound left blocks unplaced');
  const bottleneck = Math.max(...counts.map((k, i) => stageCost(costs[i] as DeviceCost, k, i === headIndex)));
  return { counts, bottleneck };
}

function sum(xs: readonly number[]): number {
  let s = 0;
  for (const x of xs) s += x;
  return s;
}
