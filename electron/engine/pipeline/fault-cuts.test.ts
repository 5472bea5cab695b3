import { describe, expect, it } from 'vitest';
import type { ModelSizes } from '../planner/fleet.js';
import { splitAt, stageChange } from '../runtime/stage-segments.js';
import type { MemberView } from '../session/host.js';
import { CUT_MIN_BYTES, withFaultCuts } from './fault-cuts.js';
import { planSessionRing, ringMemberIds } from './ring-assignment.js';
import type { RingStage } from './session-fleet.js';

const stage = (peer: number, start: number, end: number, cuts: number[] = []): RingStage => ({ peer, start, end, head: peer === 0, cuts });

describe('fault cuts', () => {
  it('cuts a fresh stage where the plans without each member reopen the fewest layers, each cut sparing CUT_MIN_BYTES in one', () => {
    const order = [stage(0, 0, 6), stage(1, 6, 15), stage(2, 15, 24), stage(3, 24, 32)];
    // Without m2 the host takes 0-8, m1 8-20, m3 20-32; without m1: m2 8-20 (keeps 15-20); without m3: m2 16-32.
    const without: Record<number, RingStage[]> = {
      1: [stage(0, 0, 8), stage(2, 8, 20), stage(3, 20, 32)],
      2: [stage(0, 0, 8), stage(1, 8, 20), stage(3, 20, 32)],
      3: [stage(0, 0, 8), stage(1, 8, 16), stage(2, 16, 32)],
    };
    const cut = (blockBytes: number, opensAnew = (_i: number) => true) => withFaultCuts(order, opensAnew, blockBytes, CUT_MIN_BYTES, (peer) => without[peer]).map((s) => s.cuts);
    // m1 uncut reopens 12 + 8 layers; cut at 8 it keeps 8-15 in both plans and reopens 5 + 1 (spares 7 in each).
    // m2 uncut reopens 12 + 16; at 16: 12 + 8 (spares 8 without m3); at 20: 7 + 16 (spares 5 without m1); at both: 7 + 8.
    expect(cut(CUT_MIN_BYTES / 6)).toEqual([[], [8], [16], []]);
    // Where 5 blocks earn a cut, m2 takes both: one for the loss on each side.
    expect(cut(CUT_MIN_BYTES / 4.5)).toEqual([[], [8], [16, 20], []]);
    // A cut must spare enough in one re-plan: m1's 7 + 7 do not add up to 7.5.
    expect(cut(CUT_MIN_BYTES / 7.5)).toEqual([[], [], [16], []]);
    expect(cut(CUT_MIN_BYTES / 100)).toEqual([[], [], [], []]);
    // A stage that is kept or reshaped keeps the segments it runs.
    expect(cut(CUT_MIN_BYTES / 6, (i) => i !== 1)).toEqual([[], [], [16], []]);
    // A threshold of 0 still makes no cut that spares nothing.
    expect(withFaultCuts(order, () => true, 1, 0, (peer) => without[peer]).map((s) => s.cuts)).toEqual([[], [8], [16, 20], []]);
  });

  it('splits an 8B ring so that losing any one member reopens no survivor whole', () => {
    const GB = 1e9;
    const model: ModelSizes = {
      name: 'llama-3.1-8b', layers: 32, blockBytes: 0.14 * GB, blockResidentBytes: 0.19 * GB, headBytes: 0.55 * GB, headResidentBytes: 1.1 * GB, kvBytesPerTokenPerLayer: 8192, stageOverheadBytes: 0.3 * GB,
    };
    const perBlock = model.blockResidentBytes! + model.kvBytesPerTokenPerLayer * 2048;
    const capabilities = (blocks: number, head = false) => ({ fleet_device: { memory_bytes: Math.round(model.stageOverheadBytes! + (head ? model.headResidentBytes : 0) + blocks * perBlock), block_ms: 20, step_ms: 1 } });
    const members = ['m1', 'm2', 'm3'].map((name, i): MemberView => ({
      memberId: name, name, fingerprint: 'abcd-0000', peer: i + 1, state: 'active', connected: true, addresses: [], lastSeenMs: 0, capabilities: capabilities(12.5),
    }));
    const input = { memoryLimits: new Map(), model, context: 2048, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 0 }, hostCapabilities: capabilities(8.5, true), links: [] };
    const first = planSessionRing({ ...input, members, serving: undefined });
    expect(first.order.some((s) => s.cuts.length > 0)).toBe(true);
    expect(first.order.some((s) => s.cuts.length === 2)).toBe(true);
    // The plan prices the segments it cut: one more fixed part of a step each.
    const uncut = planSessionRing({ ...input, members, serving: undefined, cutMinBytes: Number.POSITIVE_INFINITY });
    first.order.forEach((s, i) => {
      const [j, u] = [first.plan.stages[i]!, uncut.plan.stages[i]!];
      expect(j.segments).toBe(s.cuts.length + 1);
      expect(j.stage_ms! - u.stage_ms!).toBeCloseTo(s.cuts.length * j.step_ms!, 6);
    });
    // And so does the whole ring: its bottleneck is the costliest stage, its circuit pays every cut.
    expect(first.plan.bottleneck_ms).toBeCloseTo(Math.max(...first.plan.stages.map((s) => s.stage_ms!)), 6);
    const cuts = first.order.reduce((n, s) => n + s.cuts.length, 0);
    expect(first.plan.circuit_ms! - uncut.plan.circuit_ms!).toBeCloseTo(cuts * first.plan.stages[0]!.step_ms!, 6);
    // Also as in bench/faults' rings: members hold standby layers (nothing to fetch), the host could
    // hold a block or two more, and the ring has since measured it a little faster than reported:
    // the fastest re-plan then gives the host more blocks and cuts through the survivors' segments.
    const everyLayer = new Map(members.map((m) => [m.memberId, [{ start: 0, end: 32 }]]));
    for (const [hostBlocks, hostBlockMs, standby] of [[8.5, undefined, false], [8.5, undefined, true], [10.5, undefined, true], [10.5, 19, true], [10.5, 18, true], [10.5, 17, true]] as const) {
      const ring = { ...input, hostCapabilities: capabilities(hostBlocks, true), ...(standby ? { standbyHolds: everyLayer } : {}) };
      const start = planSessionRing({ ...ring, members, serving: undefined });
      const ids = ringMemberIds(start.order, members);
      const measuredBlockMs = new Map(hostBlockMs !== undefined ? [['', { blockMs: hostBlockMs, stepMs: 1 }]] : []);
      for (const lost of members) {
        const next = planSessionRing({ ...ring, members: members.filter((m) => m !== lost), serving: { order: start.order, memberIds: ids }, measuredBlockMs });
        for (const s of next.order) {
          const before = start.order.find((b) => b.peer === s.peer)!;
          const kept = Math.min(s.end, before.end) - Math.max(s.start, before.start);
          const change = stageChange(splitAt(before, before.cuts), s, s.cuts);
          const what = `${s.peer} ${before.start}-${before.end}/${before.cuts.join(',')} -> ${s.start}-${s.end} without ${lost.name}, host of ${hostBlocks} blocks at ${hostBlockMs ?? 20} ms`;
          if (kept * model.blockResidentBytes! >= CUT_MIN_BYTES) expect(change.kind, what).not.toBe('open');
        }
      }
    }
  });

  it('leaves a small model\'s stages in one session', () => {
    const model: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
    const members = [1, 2, 3].map((peer): MemberView => ({
      memberId: `m${peer}`, name: `m${peer}`, fingerprint: 'abcd-0000', peer, state: 'active', connected: true, addresses: [], lastSeenMs: 0, capabilities: { fleet_device: { memory_bytes: 450_000_000 } },
    }));
    const { order, plan } = planSessionRing({ members, memoryLimits: new Map(), serving: undefined, model, context: 256, concurrency: 1, hostName: 'host', hostDevice: { memoryBytes: 300_000_000 }, links: [] });
    expect(order.map((s) => s.cuts)).toEqual(order.map(() => []));
    expect(plan.stages.map((s) => s.segments)).toEqual(order.map(() => 1));
  });
});
