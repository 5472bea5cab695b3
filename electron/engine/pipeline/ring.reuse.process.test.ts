// Members keep and reuse the layers they hold (issue 15): after a member is killed the survivors'
// ranges move, and each survivor receives from the host exactly the layers it never held (its
// earlier layers stay verified on disk), which is what its `ready` and the host's `recovered`
// report as moved. The streamed text stays exactly the text without failure. Each layer is stored
// once on the member's disk (issue 14): its built file in the shard cache, the received bytes
// released once built. Members report every layer they hold built, so after a rejoin and a second
// kill the plan's fetch_bytes is what each survivor receives. Real processes on loopback, a
// synthetic 12-layer model so that ranges have room to move.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { crampedRing, generateReference, memberLoads, servingAllReady, streamCompletion, synthModel } from '../test-support/fault-ring.js';
import { isolatedCacheDir, ProcessSet } from '../test-support/processes.js';
import { diskBytesOf } from '../runtime/shard-cache.js';
import { stageTensorNames } from './member-weights.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-reuse-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

interface Range { start: number; end: number }

/**
 * A member's shard cache: the built layer files (layer -> bytes), the bytes of the initializers
 * shared by its ranges (rope tables), and what its graphs and manifests take on disk (a few KiB per
 * range and layer whatever the model's size: the index, not weights).
 */
async function shardFiles(shards: string): Promise<{ layers: Map<number, number>; sharedBytes: number; indexDisk: number }> {
  const layers = new Map<number, number>();
  let sharedBytes = 0;
  let indexDisk = 0;
  for (const model of await readdir(shards)) {
    for (const f of await readdir(join(shards, model))) {
      const st = await stat(join(shards, model, f));
      const m = /^layer-(\d+)-\w+\.bin$/.exec(f);
      if (m !== null) layers.set(Number(m[1]), (layers.get(Number(m[1])) ?? 0) + st.size);
      else if (f.startsWith('shared-')) sharedBytes += st.size;
      else indexDisk += st.blocks * 512;
    }
  }
  return { layers, sharedBytes, indexDisk };
}

/** Bytes of the tensors of `range` that none of `held` covers. */
function lackedBytes(file: GgufFile, range: Range, held: readonly Range[]): number {
  const have = new Set(held.flatMap((r) => stageTensorNames(file, r)));
  return stageTensorNames(file, range).filter((n) => !have.has(n)).reduce((sum, n) => sum + file.tensor(n)!.byteLength, 0);
}

describe('a re-plan moves only the layers members lack (real processes on loopback)', () => {
  it('a survivor whose range grows after a kill receives exactly the layers it did not hold, and the text stays identical', async () => {
    const model = await synthModel(join(tempDir(), 'reuse12.gguf'), 12, 'f32');
    const file = await openGguf(model);
    const want = generateReference(model, 'hello world', 64);
    const dir = tempDir();
    const names = ['m1', 'm2', 'm3'];
    const ring = await crampedRing(procs, model, dir);
    const before = await ring.status();
    expect(before.stages.filter((s) => s.peer !== 0).map((s) => s.name).sort(), 'every member holds layers').toEqual(names);
    const loadedBefore = new Map(names.map((n) => [n, memberLoads(ring.member(n).events).length]));
    // The middle member of the ring dies: both neighbours' ranges can move.
    const victim = before.stages.filter((s) => s.peer !== 0).sort((a, b) => a.start - b.start)[1]!.name;

    let killedAt: number | undefined;
    const got = await streamCompletion(ring.url, { model: 'reuse12', prompt: 'hello world', maxTokens: 64 }, (i) => {
      if (i === 10) {
        killedAt = Date.now();
        ring.signal(victim, 'SIGKILL');
      }
    }, { stallMs: 40_000 });
    expect(killedAt).toBeDefined();
    expect(got.error, ring.logs()).toBeUndefined();
    expect(got.text, ring.logs()).toBe((await want).text);

    const after = await ring.waitStatus((s) => servingAllReady(s) && (s.recoveries?.length ?? 0) >= 1, 'the ring serving again', 60_000, 250);
    let moved = 0;
    let grown = 0;
    let grownInPlace = 0;
    for (const name of names.filter((n) => n !== victim)) {
      const loads = memberLoads(ring.member(name).events);
      const stage = after.stages.find((s) => s.name === name);
      if (stage === undefined) continue;
      const now = loads.at(-1)!;
      expect(now, `${name}'s last load is its range in the new plan\n${ring.logs()}`).toMatchObject({ start: stage.start, end: stage.end });
      if (loads.length === loadedBefore.get(name)) continue; // kept its stage: nothing moved
      const held = loads.slice(0, -1);
      const lacked = lackedBytes(file, now, held);
      expect(now.transferred, `${name}: ${JSON.stringify(loads)}\n${ring.logs()}`).toBe(lacked);
      moved += now.transferred;
      const full = stageTensorNames(file, now).reduce((sum, n) => sum + file.tensor(n)!.byteLength, 0);
      if (lacked < full && now.end - now.start > Math.max(...held.map((r) => r.end - r.start))) grown++;
      // A range that contains the one it ran opens only the added layers beside its running session (stage-segments.ts).
      const ran = held.at(-1)!;
      if (now.start <= ran.start && ran.end <= now.end) {
        expect(now.segments, `${name} grew ${ran.start}-${ran.end} to ${now.start}-${now.end} in place`).toBe(ran.segments + (now.start < ran.start ? 1 : 0) + (now.end > ran.end ? 1 : 0));
        grownInPlace++;
      }
    }
    // Disk: every layer the member loaded, once, as the shard cache keeps it; the received bytes of
    // built layers are released (only the GGUF header stays raw: the model-wide metadata). Weights
    // on disk (all but the graphs' index) <= 1.1x the built bytes of its layers and shared tables.
    for (const name of names.filter((n) => n !== victim)) {
      const loads = memberLoads(ring.member(name).events);
      const cache = join(dir, `cache-${name}`);
      const { layers, sharedBytes, indexDisk } = await shardFiles(join(cache, 'shards'));
      const loadedLayers = [...new Set(loads.flatMap((r) => Array.from({ length: r.end - r.start }, (_, i) => r.start + i)))].sort((a, b) => a - b);
      expect([...layers.keys()].sort((a, b) => a - b), `${name}: one built file per layer it loaded`).toEqual(loadedLayers);
      const layerBytes = [...layers.values()].reduce((a, b) => a + b, 0);
      const disk = await diskBytesOf(cache);
      const received = await diskBytesOf(join(cache, 'weights'));
      const detail = `${name}: ${loads.length} loads, ${layers.size} layers built ${layerBytes} B + shared ${sharedBytes} B; on disk ${disk} B (received ${received} B, index ${indexDisk} B)`;
      console.log(detail);
      expect(disk - indexDisk, detail).toBeLessThanOrEqual(1.1 * (layerBytes + sharedBytes) + file.dataOffset);
    }
    expect(grown, `a survivor's range grew over layers it held\n${ring.logs()}`).toBeGreaterThan(0);
    expect(grownInPlace, `a survivor's range grew around the one it ran (the planner prefers it: fewer blocks reopened)\n${ring.logs()}`).toBeGreaterThan(0);
    expect(after.recoveries?.[0]?.bytesMoved).toBe(moved);
    const recovered = ring.hostEvents('recovered');
    expect(recovered[0]?.bytes_moved).toBe(moved);

    // Again after a rejoin: the restarted victim comes back with its shard cache (its first range
    // built) and the survivors' ranges shrink (their grown ranges stay built in their caches). Every
    // member tells the host all the layers it holds built, with or without standby layers, so when
    // one more member dies the plan's fetch_bytes for each survivor is what it then receives.
    await ring.startMember(victim);
    const back = await ring.waitStatus((s) => s.phase === 'serving' && s.stages.some((x) => x.name === victim && (x.state === 'ready' || x.state === 'kept')), `${victim} back in the ring`, 60_000, 250);
    const recoveriesBack = back.recoveries?.length ?? 0;
    const second = back.stages.filter((s) => s.peer !== 0 && s.name !== victim).sort((a, b) => a.start - b.start)[0]!.name;
    const survivors = names.filter((n) => n !== second);
    const loadsBack = new Map(survivors.map((n) => [n, memberLoads(ring.member(n).events).length]));
    const plansBefore = ring.hostEvents('plan').length;
    ring.signal(second, 'SIGKILL');
    const last = await ring.waitStatus((s) => servingAllReady(s) && (s.recoveries?.length ?? 0) > recoveriesBack, 'the ring serving after the second kill', 60_000, 250);
    const plan = ring.hostEvents('plan').at(-1)!;
    expect(ring.hostEvents('plan').length).toBeGreaterThan(plansBefore);
    let planned = 0;
    let movedAgain = 0;
    let reusedBuilt = 0;
    for (const name of survivors) {
      const stage = (plan.stages as Array<{ device: string; start: number; end: number; fetch_bytes: number }>).find((s) => s.device === name);
      if (stage === undefined) continue;
      const loads = memberLoads(ring.member(name).events);
      const got = loads.length > loadsBack.get(name)! ? loads.at(-1)!.transferred : 0;
      expect(stage.fetch_bytes, `${name}: planned ${JSON.stringify(stage)}, loads ${JSON.stringify(loads)}\n${ring.logs()}`).toBe(got);
      planned += stage.fetch_bytes;
      movedAgain += got;
      // Layers this survivor runs now that were built in its cache but outside the stage it ran before the kill.
      const before = back.stages.find((s) => s.name === name);
      if (before !== undefined) reusedBuilt += lackedBytes(file, stage, [before]) - got;
    }
    console.log(`second kill (${second}): planned ${planned} B, moved ${movedAgain} B, reused from shard caches beyond the stages ${reusedBuilt} B`);
    expect(last.recoveries?.at(-1)?.bytesMoved).toBe(movedAgain);
    expect(plan.fetch_bytes).toBe(planned);
    expect(reusedBuilt, `a survivor took back layers it held only in its shard cache\n${ring.logs()}`).toBeGreaterThan(0);
    expect(ring.hostEvents('error')).toEqual([]);
  }, 240_000);
});
