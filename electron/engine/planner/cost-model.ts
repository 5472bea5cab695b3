// The planner's cost model (Kafila §V-A): what a stage of `blocks` blocks (plus the head, if it
// holds it) costs per token on one device, and how much memory it needs. Pure arithmetic.
//
// A stage's decode step costs step + blocks × perBlock + head (bench/stage-prediction.ts checks it
// against real stages): `step` is the fixed part of every session run whatever its blocks (the run
// itself and its worker round trip, the embedding lookup, feeds and fetches), measured by the block
// probe (runtime/block-probe.ts: a one-block and a four-block stage); a block and the head are weight reads
// of the runtime's packed form (MLAS's layout: Q4_0 6 bits a weight, not the file's 4.5), priced by
// measured bandwidth or, better, scaled from the measured block time, which holds the device's
// real matmul throughput. Attention's K/V reads at short positions are well under 1% of a block's
// weights (1B: 4 KiB a position against 46 MB), so they are left out. A ring's circuit adds, per
// edge, the link's RTT and the sending device's measured hop cost beyond it (plan.ts; DeviceSpec.hopMs).
import { stageOverheadAt, type DeviceSpec, type Fleet } from './fleet.js';
import { HOST_API_BYTES } from './model-sizes.js';

/**
 * Which input the costs come from, best first. One tier for the whole plan: the best that every
 * device can supply. `memory` has no time unit (costs are shares of the fleet's memory).
 */
export type Tier = 'measured' | 'bandwidth' | 'flops' | 'memory';

export interface DeviceCost {
  /** Cost of one block per token: ms, or a relative unit in the `memory` tier. */
  perBlock: number;
  /** Extra cost per token of holding the head (final norm + output projection read). */
  head: number;
  /** Fixed cost of a stage's step whatever its blocks (ms; absent or 0 where unmeasured, and outside the time tiers). */
  step?: number;
  /** Measured cost of a ring hop out of the device beyond the link's one-way time (ms; 0 where unmeasured and outside the time tiers). */
  hop?: number;
  /** What one block adds per cached position of the request (ms; 0 where unmeasured and outside the time tiers; DeviceSpec.positionMs). */
  position?: number;
  /** Memory one block needs: its weights plus its KV cache at the session's context and concurrency. */
  blockMemoryBytes: number;
  /** Extra memory of the head: embedding and output projection. */
  headMemoryBytes: number;
  /** Memory left for blocks and head: the device's, less the stage process's own overhead. */
  memoryBytes: number;
  /** The stage process's own memory (runtime baseline, scratch), part of every stage's memory. */
  overheadBytes?: number;
}

/** Picks the best tier every device can supply (Kafila §V-D: degrade when inputs are missing). */
export function chooseTier(devices: readonly DeviceSpec[]): Tier {
  if (devices.every((d) => d.blockMs !== undefined)) return 'measured';
  // A measured block time and a bandwidth estimate are both ms per token, so they mix.
  if (devices.every((d) => d.blockMs !== undefined || d.bandwidthGBps !== undefined)) return 'bandwidth';
  if (devices.every((d) => d.tflops !== undefined)) return 'flops';
  return 'memory';
}

/** Per-device costs in the given tier (the tier must be one chooseTier allows for these devices). */
export function deviceCosts(fleet: Fleet, tier: Tier): DeviceCost[] {
  const { model } = fleet;
  // Resident weights (the runtime's packed form when known) plus the KV cache of every request and the block's share of the prompt cache.
  const blockMemoryBytes = (model.blockResidentBytes ?? model.blockBytes) + model.kvBytesPerTokenPerLayer * fleet.context * fleet.concurrency + (model.promptCacheBytesPerBlock ?? 0);
  const overhead = stageOverheadAt(model, fleet.context, fleet.concurrency);
  const headShare = model.headBytes / model.blockBytes;
  // Bytes a token reads, in the runtime's form when known (the time tiers price reads).
  const blockRead = model.blockResidentBytes ?? model.blockBytes;
  const headRead = model.headReadBytes ?? model.headBytes;
  const largestMemory = Math.max(...fleet.devices.map((d) => d.memoryBytes));
  return fleet.devices.map((d) => {
    // The runtime's own memory counts where the device's figure covers the whole process.
    const overheadBytes = d.memoryCoversRuntime === true ? overhead + (d.servesApi === true ? HOST_API_BYTES : 0) : 0;
    let perBlock: number;
    let head: number;
    let step = 0;
    let hop = 0;
    let position = 0;
    switch (tier) {
      case 'measured':
      case 'bandwidth': {
        step = d.stepMs ?? 0;
        hop = d.hopMs ?? 0;
        position = d.positionMs ?? 0;
        if (d.blockMs !== undefined) {
          perBlock = d.blockMs;
          // The head as the probe timed it; else the same kind of matmul as the block's: the
          // measured block time scaled by the bytes each reads (a pure bandwidth price would miss
          // the device's compute share; runtime/block-probe.ts says how far off that came).
          head = d.headMs ?? d.blockMs * (headRead / blockRead);
        } else {
          const gbps = required(d.bandwidthGBps, d.name, 'bandwidth_gbps');
          // At batch size one a stage reads each weight once per token (Kafila §V-A).
          perBlock = bandwidthMs(blockRead, gbps);
          head = bandwidthMs(headRead, gbps);
        }
        break;
      }
      case 'flops': {
        const tflops = required(d.tflops, d.name, 'tflops');
        // Without a parameter count, one byte per parameter (8-bit weights) stands in; only the
        // ratios between devices decide the division in this tier.
        const params = model.blockParams ?? model.blockBytes;
        perBlock = ((2 * params) / (tflops * 1e12)) * 1000;
        head = perBlock * headShare;
        break;
      }
      case 'memory': {
        // Nothing measured: a block costs inversely to the device's memory, so the optimal
        // division is the memory-proportional one. Unit: one block on the largest device.
        perBlock = d.memoryBytes > 0 ? largestMemory / d.memoryBytes : Number.POSITIVE_INFINITY;
        head = perBlock * headShare;
        break;
      }
    }
    return {
      perBlock,
      head,
      step,
      hop,
      position,
      blockMemoryBytes,
      headMemoryBytes: model.headResidentBytes,
      memoryBytes: d.memoryBytes - overheadBytes,
      overheadBytes,
    };
  });
}

export function bandwidthMs(bytes: number, gbps: number): number {
  return (bytes / (gbps * 1e9)) * 1000;
}

/**
 * Cost per token of a stage holding `blocks` blocks (and the head if `head`), run as `segments`
 * sessions (a stage reshaped or opened split, runtime/stage-segments.ts): each pays the fixed part of a step.
 */
export function stageCost(c: DeviceCost, blocks: number, head: boolean, segments = 1): number {
  return segments * (c.step ?? 0) + blocks * c.perBlock + (head ? c.head : 0);
}

/** Memory a stage process needs, in bytes (its overhead included). */
export function stageMemoryBytes(c: DeviceCost, blocks: number, head: boolean): number {
  return blocks * c.blockMemoryBytes + (head ? c.headMemoryBytes : 0) + (c.overheadBytes ?? 0);
}

/** The most blocks the device can hold in memory (with the head if `head`); -1 when not even the head fits. */
export function memoryCapacityBlocks(c: DeviceCost, head: boolean): number {
  const room = c.memoryBytes - (head ? c.headMemoryBytes : 0);
  if (room < 0) return -1;
  // blockMemoryBytes ≥ 1 (block_bytes ≥ 1), so this is finite.
  return Math.floor(room / c.blockMemoryBytes);
}

/** The most blocks whose stage cost stays within `bound` (exactly as stageCost computes it). */
export function costCapacityBlocks(c: DeviceCost, head: boolean, bound: number, limit: number): number {
  if (stageCost(c, 0, head) > bound) return -1;
  if (c.perBlock === 0) return limit;
  let k = Math.min(limit, Math.floor((bound - (c.step ?? 0) - (head ? c.head : 0)) / c.perBlock));
  k = Math.max(0, k);
  // Floating-point division may be off by one either way; settle it with the same arithmetic
  // the candidates were computed with, so a candidate bound always admits its own stage.
  while (k > 0 && stageCost(c, k, head) > bound) k--;
  while (k < limit && stageCost(c, k + 1, head) <= bound) k++;
  return k;
}

function required(value: number | undefined, device: string, field: string): number {
  if (value === undefined) throw new Error(`bug: tier needs ${field} of ${device}`);
  return value;
}
