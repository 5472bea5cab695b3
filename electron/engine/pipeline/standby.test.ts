// Standby selection (standby.ts) and standby holds in the plan (ring-assignment.ts).
import { describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import type { ModelSizes } from '../planner/fleet.js';
import type { MemberView } from '../session/host.js';
import { stageSpans } from './member-weights.js';
import { planSessionRing } from './ring-assignment.js';
import { builtStandbyBudget, layerRanges, selectStandby, standbyBudgetBytes, standbyLayerSpans, standbyOrder } from './standby.js';

describe('which layers a member keeps on standby', () => {
  it('takes both neighbours first, growing outwards, the host\'s own blocks last', () => {
    expect(standbyOrder({ start: 3, end: 5 }, 8)).toEqual([5, 2, 6, 1, 7, 0]);
    expect(standbyOrder({ start: 3, end: 5 }, 8, 2)).toEqual([5, 2, 6, 7, 1, 0]);
    expect(standbyOrder({ start: 0, end: 2 }, 4)).toEqual([2, 3]);
    expect(standbyOrder({ start: 0, end: 4 }, 4)).toEqual([]);
  });

  it('fits the disk budget, stopping at the first layer that does not fit, and names only bytes the stage lacks', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const range = { start: 2, end: 3 };
    const own = new Set(stageSpans(file, range).map((s) => s.offset));
    const layerBytes = (L: number): number => file.tensors.filter((t) => t.name.startsWith(`blk.${L}.`)).reduce((n, t) => n + t.byteLength, 0);
    // Layer 3 then 1 fit in their bytes exactly; one byte less keeps only layer 3.
    const two = layerBytes(3) + layerBytes(1);
    expect(selectStandby(file, range, 5, two, 0).map((l) => l.layer)).toEqual([3, 1]);
    expect(selectStandby(file, range, 5, two - 1, 0).map((l) => l.layer)).toEqual([3]);
    expect(selectStandby(file, range, 5, 0, 0)).toEqual([]);
    // The whole model where it fits: every other layer, layer 0 with the token embedding.
    const all = selectStandby(file, range, 5, 1e12, 0);
    expect(all.map((l) => l.layer)).toEqual([3, 1, 4, 0]);
    for (const l of all) {
      expect(l.spans.some((s) => own.has(s.offset) || s.offset === 0), `layer ${l.layer} repeats the stage's spans`).toBe(false);
      const embd = l.layer === 0 ? file.tensor('token_embd.weight')!.byteLength : 0;
      expect(l.bytes).toBe(layerBytes(l.layer) + embd);
    }
    expect(standbyLayerSpans(file, range, 2)).toEqual([]);
  });

  it('merges held layers into ranges and reads the budget in GB', () => {
    expect(layerRanges([5, 1, 2, 3, 7, 2])).toEqual([{ start: 1, end: 4 }, { start: 5, end: 6 }, { start: 7, end: 8 }]);
    expect(standbyBudgetBytes('0.5', '--standby-gb')).toBe(500_000_000);
    expect(standbyBudgetBytes(undefined, '--standby-gb')).toBeUndefined();
    expect(standbyBudgetBytes('0', '--standby-gb')).toBeUndefined();
    for (const bad of ['', 'ten', '-1', 'Infinity']) expect(() => standbyBudgetBytes(bad, '--standby-gb')).toThrow(/--standby-gb takes a number of GB/);
  });
});

describe('a disk budget for built standby layers', () => {
  it('holds the GGUF bytes whose built form fits it: a layer built to 1.3x its bytes takes 1.3x the disk', () => {
    expect(builtStandbyBudget({ blockBytes: 100, blockResidentBytes: 130 }, 1300)).toBe(1000);
    // A runtime size unknown (or smaller than the file's) counts the file's own bytes.
    expect(builtStandbyBudget({ blockBytes: 100 }, 1300)).toBe(1300);
    expect(builtStandbyBudget({ blockBytes: 100, blockResidentBytes: 90 }, 1300)).toBe(1300);
  });
});

describe('standby holds in the plan', () => {
  const model: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
  const member = (memberId: string, peer: number): MemberView => ({
    memberId, name: memberId, fingerprint: 'abcd-0000', peer, state: 'active', connected: true, addresses: ['ws://127.0.0.1:7000'], lastSeenMs: 0,
    capabilities: { fleet_device: { memory_bytes: 4_000_000_000 } },
  });
  const plan = (standbyHolds?: Map<string, Array<{ start: number; end: number }>>) => planSessionRing({
    members: [member('ada', 1), member('bob', 2)], memoryLimits: new Map(), serving: { order: [{ peer: 0, start: 0, end: 0, head: true, cuts: [] }, { peer: 1, start: 0, end: 4, head: false, cuts: [] }], memberIds: ['ada'] },
    ...(standbyHolds !== undefined ? { standbyHolds } : {}),
    model, context: 256, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 360_000_000 }, links: [],
  }).plan;

  it('counts layers a member holds on standby as held: its fetch_bytes is 0 for them', () => {
    const before = plan();
    const ada = (p: typeof before) => p.stages.find((s) => s.device === 'ada')!;
    const kept = Math.max(0, Math.min(4, ada(before).end) - Math.max(0, ada(before).start));
    expect(ada(before).fetch_bytes).toBe((ada(before).end - ada(before).start - kept) * model.blockBytes);
    expect(ada(before).fetch_bytes, 'without standby holds ada fetches').toBeGreaterThan(0);
    const after = plan(new Map([['ada', [{ start: 0, end: 8 }]]]));
    expect(ada(after).fetch_bytes).toBe(0);
    // Bob holds nothing: what it runs it fetches.
    const bob = after.stages.find((s) => s.device === 'bob')!;
    expect(bob.fetch_bytes).toBe((bob.end - bob.start) * model.blockBytes);
    expect(after.fetch_bytes).toBe(after.stages.filter((s) => s.device !== 'ada').reduce((n, s) => n + s.fetch_bytes, 0));
  });
});
