import { describe, expect, test } from 'vitest';
import { flowCapabilities, withMemoryBudget } from './flow-capabilities.js';

/** What the planner reads of a summary (pipeline/session-fleet.ts: fleet_device). */
const fleetDevice = (caps: Record<string, unknown> | undefined) => caps?.fleet_device as { memory_bytes: number; bandwidth_gbps?: number | null } | undefined;

const bench = { version: 2, fleet_device: { name: 'pc', memory_bytes: 8 * 2 ** 30, bandwidth_gbps: 20, block_ms: null } };

describe('flowCapabilities', () => {
  test('a --capabilities file is sent as it is, without a bench', async () => {
    expect(await flowCapabilities({ file: bench, bench: true })).toEqual(bench);
  });

  test('--no-bench without a file sends nothing', async () => {
    expect(await flowCapabilities({ bench: false })).toBeUndefined();
  });

  test('--memory-mb caps the memory the planner sees, and stands alone without a summary', async () => {
    const capped = await flowCapabilities({ file: bench, bench: false, memoryBudgetBytes: 1024 * 2 ** 20 });
    expect(fleetDevice(capped)).toMatchObject({ memory_bytes: 1024 * 2 ** 20, bandwidth_gbps: 20 });
    expect(capped?.memory_budget_bytes).toBe(1024 * 2 ** 20);
    // A budget above what the machine has does not raise it.
    expect(fleetDevice(withMemoryBudget(bench, 64 * 2 ** 30))?.memory_bytes).toBe(8 * 2 ** 30);
    expect(fleetDevice(await flowCapabilities({ bench: false, memoryBudgetBytes: 512 * 2 ** 20 }))).toEqual({ memory_bytes: 512 * 2 ** 20 });
    expect(() => withMemoryBudget(bench, 0)).toThrow(/positive/);
  });
});
