import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import type { ModelSizes } from '../planner/fleet.js';
import { deviceCosts } from '../planner/cost-model.js';
import { budgetRefusal, budgetTooSmallError, MemberBudgets, oneLayerNeed, promptCacheSizes } from './member-budget.js';
import { HostToMemberBody, parsePipelineBody } from './ring-protocol.js';

const MIB = 2 ** 20;
const sizes: ModelSizes = {
  name: 't', layers: 4, blockBytes: 3 * MIB, headBytes: MIB, headResidentBytes: MIB,
  kvBytesPerTokenPerLayer: 2048, blockResidentBytes: 4.5 * MIB, stageOverheadBytes: 161.2 * MIB,
};

describe('member memory budget', () => {
  it('needs the runtime, one resident block and its KV at the context, each rounded up to whole MiB', () => {
    // KV: 2048 bytes × 8192 positions = 16 MiB. Runtime: the 161.2 MiB overhead plus what a
    // one-pass replay leaves (2 × a 64 MiB chunk; a row of 8192 positions is 32 MiB).
    expect(oneLayerNeed(sizes, 8192)).toEqual({ runtimeMib: 290, layerMib: 5, kvMib: 16, neededMib: 311 });
    expect(oneLayerNeed(sizes, 8192, 2).kvMib).toBe(32);
    // The block's share of the host's prompt cache (256 MiB over 4 layers) is KV it holds too.
    expect(oneLayerNeed(promptCacheSizes(sizes, 256 * MIB), 8192)).toEqual({ runtimeMib: 290, layerMib: 5, kvMib: 80, neededMib: 375 });
  });

  it("adds each block its share of the host's prompt cache to what the planner admits (none when the cache is off)", () => {
    expect(promptCacheSizes(sizes, 0)).toBe(sizes);
    expect(promptCacheSizes(sizes, 256 * MIB).promptCacheBytesPerBlock).toBe(64 * MIB);
    const blockMemory = (model: ModelSizes): number => deviceCosts({ model, context: 64, concurrency: 1, devices: [{ name: 'a', memoryBytes: 2 ** 30 }], rtts: [] }, 'memory')[0]!.blockMemoryBytes;
    expect(blockMemory(promptCacheSizes(sizes, 256 * MIB)) - blockMemory(sizes)).toBe(64 * MIB);
  });

  it('refuses a budget below that, with the figure, and passes one at or above it or none at all', () => {
    const r = budgetRefusal({ memory_budget_bytes: 170 * MIB }, sizes, 8192);
    expect(r).toEqual({ kind: 'budget-too-small', budgetMib: 170, neededMib: 311, runtimeMib: 290, layerMib: 5, kvMib: 16, context: 8192 });
    expect(budgetRefusal({ memory_budget_bytes: 311 * MIB }, sizes, 8192)).toBeUndefined();
    expect(budgetRefusal({ memory_bytes: 10 * MIB }, sizes, 8192)).toBeUndefined();
    const err = budgetTooSmallError(r!);
    expect(err.code).toBe('MEMORY_BUDGET_TOO_SMALL');
    expect(err.message).toMatch(/needs at least 311 MiB per member \(runtime 290 \+ one layer 5 \+ KV 16 .*rerun with --memory-mb 311 or more/);
  });

  it('is a host-to-member message that is validated: parts that do not add up, or a budget that fits, are refused', () => {
    const r = budgetRefusal({ memory_budget_bytes: 170 * MIB }, sizes, 8192)!;
    expect(parsePipelineBody(HostToMemberBody, r)).toEqual(r);
    const bad = (body: unknown): string => {
      try {
        parsePipelineBody(HostToMemberBody, body);
        return 'accepted';
      } catch (err) {
        return isKiwiError(err) ? err.code : String(err);
      }
    };
    expect(bad({ ...r, neededMib: 200 })).toBe('RING_PROTOCOL');
    expect(bad({ ...r, budgetMib: 311 })).toBe('RING_PROTOCOL');
    expect(bad({ ...r, extra: 1 })).toBe('RING_PROTOCOL');
  });

  it('tells a refused member once per budget, after the context is read', async () => {
    const told: number[] = [];
    let changed!: () => void;
    const ready = new Promise<void>((resolve) => (changed = resolve));
    const budgets = new MemberBudgets(sizes, 1, () => Promise.resolve(8192), (_m, r) => told.push(r.budgetMib), () => changed());
    const small = { memberId: 'a', name: 'ada', capabilities: { memory_budget_bytes: 170 * MIB } };
    expect(budgets.verdict({ memberId: 'b', name: 'bob', capabilities: undefined })).toBe('ok');
    expect(budgets.verdict(small)).toBeUndefined();
    await ready;
    expect(budgets.verdict(small)).toBe('refused');
    expect(budgets.verdict(small)).toBe('refused');
    expect(told).toEqual([170]);
    expect(budgets.verdict({ ...small, capabilities: { memory_budget_bytes: 175 * MIB } })).toBe('refused');
    expect(budgets.verdict({ ...small, capabilities: { memory_budget_bytes: 400 * MIB } })).toBe('ok');
    expect(told).toEqual([170, 175]);
  });
});
