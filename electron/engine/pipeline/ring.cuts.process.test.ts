// Stages split where losing a member would cut them (issue 15, pipeline/fault-cuts.ts): a survivor
// whose range moves after a kill keeps the segment inside its new range and opens only the layers
// added, instead of reopening its whole range. On real models the host splits a stage only where
// that spares 512 MiB of weights; KIWI_CUT_MIN_MB=0 lets it split this small synthetic model. Real
// processes on loopback; the streamed text stays exactly the text without failure.
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { crampedRing, generateReference, memberLoads, servingAllReady, streamCompletion, synthModel } from '../test-support/fault-ring.js';
import { isolatedCacheDir, ProcessSet } from '../test-support/processes.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-cuts-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

describe('stages split where a re-plan would cut them (real processes on loopback)', () => {
  it('a survivor whose range moves after a kill opens only the layers it adds, and the text stays identical', async () => {
    const model = await synthModel(join(tempDir(), 'cuts12.gguf'), 12, 'f32');
    const want = generateReference(model, 'hello world', 48);
    const names = ['m1', 'm2', 'm3'];
    const ring = await crampedRing(procs, model, tempDir(), { hostEnv: { KIWI_CUT_MIN_MB: '0' } });
    const first = new Map(names.map((n) => [n, memberLoads(ring.member(n).events)]));
    const plan = ring.hostEvents('plan').at(-1)!;
    const planned = plan.stages as Array<{ device: string; start: number; end: number; segments: number }>;
    // Every member opened its range whole, in the segments the plan cut it into.
    for (const n of names) {
      const s = planned.find((p) => p.device === n)!;
      expect(first.get(n), `${n}: ${JSON.stringify(planned)}\n${ring.logs()}`).toMatchObject([{ start: s.start, end: s.end, segments: s.segments, opened: s.end - s.start }]);
    }
    expect(planned.some((s) => s.segments > 1), `the plan cut a stage\n${JSON.stringify(planned)}`).toBe(true);

    const before = await ring.status();
    // The first member goes: the host can take one block of its range at most, so the next member's
    // range must move back over its end (a re-plan may give up a block to let survivors only grow,
    // planner/plan.ts reopenSlackBlocks, but not here).
    const victim = before.stages.filter((s) => s.peer !== 0).sort((a, b) => a.start - b.start)[0]!.name;
    const got = await streamCompletion(ring.url, { model: 'cuts12', prompt: 'hello world', maxTokens: 48 }, (i) => {
      if (i === 10) ring.signal(victim, 'SIGKILL');
    }, { stallMs: 40_000 });
    expect(got.error, ring.logs()).toBeUndefined();
    expect(got.text, ring.logs()).toBe((await want).text);
    await ring.waitStatus((s) => servingAllReady(s) && (s.recoveries?.length ?? 0) >= 1, 'the ring serving again', 60_000, 250);

    // Each survivor that loaded again opened only the layers outside the segments it kept.
    let shifted = 0;
    for (const n of names.filter((x) => x !== victim)) {
      const all = memberLoads(ring.member(n).events);
      if (all.length === 1) continue; // kept its stage
      const [was, now] = [all[0]!, all.at(-1)!];
      const overlap = Math.max(0, Math.min(was.end, now.end) - Math.max(was.start, now.start));
      const detail = `${n}: ${JSON.stringify(all)}\n${ring.logs()}`;
      expect(now.opened, detail).toBeGreaterThanOrEqual(now.end - now.start - overlap);
      if (now.start > was.start || now.end < was.end) {
        // Its range moved: it kept the segment inside the new one rather than reopening all of it.
        expect(now.opened, detail).toBeLessThan(now.end - now.start);
        shifted++;
      }
    }
    expect(shifted, `a survivor's range moved over a cut\n${ring.logs()}`).toBeGreaterThan(0);
    expect(ring.hostEvents('error')).toEqual([]);
  }, 180_000);
});
