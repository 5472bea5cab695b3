// Admission (Kafila §V-D): when no division fits the fleet's memory, name the device that is
// short and by how much. Pure; the planner calls it only after every head choice failed.
import { memoryCapacityBlocks, type DeviceCost } from './cost-model.js';

export interface Shortfall {
  /** Index of the device named in the refusal. */
  device: number;
  /**
   * Bytes that device lacks. When `alone` is true this is exact: with that much more memory on
   * that device the model fits, with one byte less it does not.
   */
  shortByBytes: number;
  /** Whether adding shortByBytes to that one device suffices (false: several devices are short). */
  alone: boolean;
  /** Devices that cannot hold even one block without the head. */
  cannotHoldABlock: number[];
}

/**
 * The smallest memory increase on a single device that makes some division fit (over every head
 * choice and every device); when no single device can fix it, the device furthest from holding
 * one block.
 */
export function memoryShortfall(costs: readonly DeviceCost[], layers: number): Shortfall {
  const m = costs.length;
  const perDeviceLimit = layers - (m - 1);
  const cannotHoldABlock = costs.flatMap((c, i) => (memoryCapacityBlocks(c, false) < 1 ? [i] : []));
  let best: Shortfall | null = null;
  for (let head = 0; head < m; head++) {
    const caps = costs.map((c, j) => memoryCapacityBlocks(c, j === head));
    for (let d = 0; d < m; d++) {
      if (caps.some((cap, j) => j !== d && cap < 1)) continue;
      let others = 0;
      caps.forEach((cap, j) => {
        if (j !== d) others += Math.min(cap, perDeviceLimit);
      });
      const needBlocks = Math.max(1, layers - others);
      const c = costs[d] as DeviceCost;
      const need = needBlocks * c.blockMemoryBytes + (d === head ? c.headMemoryBytes : 0);
      const short = need - c.memoryBytes;
      if (short <= 0) throw new Error('bug: memoryShortfall called on a fleet that fits');
      if (best === null || short < best.shortByBytes) best = { device: d, shortByBytes: short, alone: true, cannotHoldABlock };
    }
  }
  if (best !== null) return best;
  // Two or more devices cannot hold a block: name the one that lacks the most.
  let device = cannotHoldABlock[0] ?? 0;
  let shortByBytes = -Infinity;
  for (const i of cannotHoldABlock) {
    const c = costs[i] as DeviceCost;
    const short = c.blockMemoryBytes - c.memoryBytes;
    if (short > shortByBytes) {
      device = i;
      shortByBytes = short;
    }
  }
  return { device, shortByBytes, alone: false, cannotHoldABlock };
}
