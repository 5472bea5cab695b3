// The device summary `kiwi host` plans itself with and `kiwi join` shows the host: a --capabilities
// file when given, else this machine's device bench (cached per hardware, device-bench.ts) unless
// the flow was told not to measure, with a whole-process memory budget (--memory-mb) applied on top.
import { KiwiError } from '../errors.js';
import { runDeviceBench, type DeviceBenchOptions } from './device-bench.js';

export interface FlowCapabilitiesOptions {
  /** A device summary read from a file (`kiwi bench --json`): used as it is, no bench runs. */
  file?: Record<string, unknown>;
  /** Run the device bench when no file is given (false: --no-bench). */
  bench: boolean;
  /** The most memory this process may use, runtime included (--memory-mb). */
  memoryBudgetBytes?: number;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
  /** For tests: where the bench keeps its cache. */
  benchOptions?: Omit<DeviceBenchOptions, 'onProgress' | 'signal'>;
}

/** The summary to send (undefined: none, the host then stands in its own figures). */
export async function flowCapabilities(opts: FlowCapabilitiesOptions): Promise<Record<string, unknown> | undefined> {
  let caps: Record<string, unknown> | undefined = opts.file;
  if (caps === undefined && opts.bench) {
    caps = { ...(await runDeviceBench({ ...opts.benchOptions, ...(opts.onProgress ? { onProgress: opts.onProgress } : {}), ...(opts.signal ? { signal: opts.signal } : {}) })) };
  }
  return opts.memoryBudgetBytes !== undefined ? withMemoryBudget(caps, opts.memoryBudgetBytes) : caps;
}

/**
 * The summary with its fleet device's memory capped at `budget` (a device without a summary gets
 * one with just that memory). The planner then admits the member's layers, KV cache and the
 * runtime's own baseline within the budget (planner/model-sizes.ts: stageOverheadBytes).
 */
export function withMemoryBudget(caps: Record<string, unknown> | undefined, budget: number): Record<string, unknown> {
  if (!Number.isSafeInteger(budget) || budget <= 0) throw new KiwiError('USAGE', `a memory budget must be a positive number of bytes, not ${budget}`);
  const device = caps?.fleet_device;
  const fleetDevice = typeof device === 'object' && device !== null ? (device as Record<string, unknown>) : {};
  const current = typeof fleetDevice.memory_bytes === 'number' ? fleetDevice.memory_bytes : Number.POSITIVE_INFINITY;
  return { ...caps, memory_budget_bytes: budget, fleet_device: { ...fleetDevice, memory_bytes: Math.min(current, budget) } };
}
