// Standby layers (issue 15) with real processes on loopback: host + 2 members that keep standby
// layers (`kiwi join --standby-gb`) fetch, once the ring serves, the layers beside their ranges
// from the host's range server. One member is killed with SIGKILL mid-stream: the survivor takes
// over the dead member's layers from its standby copies, receiving no weight bytes for them (its
// `ready` and the host's `recovered`), and the streamed text equals `kiwi generate`'s. The same
// ring without standby receives those layers during the recovery; both stalls are printed. With
// `kiwi host --standby-gb` the host builds the layers after its own into its shard cache.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import { FaultRing, generateReference, servingAllReady, stallAfter, streamCompletion, synthModel } from '../test-support/fault-ring.js';
import { isolatedCacheDir, ProcessSet, waitEvent, type Event } from '../test-support/processes.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-standby-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const readies = (events: readonly Event[]): Event[] => events.filter((e) => e.event === 'ready');

describe('standby layers (real processes on loopback)', () => {
  for (const standby of [true, false]) {
    it(standby ? 'a survivor takes over a killed member\'s layers from its standby copies: no weight bytes move, the text stays exact' : 'without standby the survivor receives those layers during the recovery', async () => {
      // Each case on fresh disks: the members' caches are per folder.
      const dir = join(tempDir(), standby ? 'with' : 'without');
      await mkdir(dir);
      const model = await synthModel(join(dir, 'standby8.gguf'), 8, 'f32');
      const file = await openGguf(model);
      const want = generateReference(model, 'hello world', 64);
      // The host holds 2 blocks; each member can hold all 6 others, so one survivor can take everything
      // (no prompt cache: its share per block would change what fits).
      const sizes = modelSizesFromGguf(file);
      const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 1024;
      const hostCaps = join(dir, 'capabilities-host.json');
      await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + 2 * perBlock + perBlock / 2 } }));
      const names = ['m1', 'm2'];
      const args = standby ? ['--standby-gb', '1'] : [];
      const ring = await FaultRing.start(procs, {
        model, dir, heartbeatMs: 500, heartbeatTimeoutS: 10, recoveryTimeoutS: 30, hostArgs: ['--capabilities', hostCaps, '--prompt-cache-mb', '0', ...args],
        members: names.map((name) => ({ name, memoryBytes: 6 * perBlock + perBlock / 2, args })),
      });
      const before = await ring.status();
      const ranges = before.stages.filter((s) => s.peer !== 0);
      expect(ranges.map((s) => s.name).sort(), 'both members hold layers').toEqual(names);
      const [victim, survivor] = [ranges[0]!.name, ranges[1]!.name];
      if (standby) {
        // Every layer the survivor does not run is on its disk before the kill (1 GB holds the whole model).
        const done = await waitEvent(ring.member(survivor), (e) => e.event === 'standby', 'the survivor\'s standby layers', 60_000);
        const own = ranges[1]!;
        expect(done.layers, JSON.stringify(done)).toEqual([0, 1, 2, 3, 4, 5, 6, 7].filter((L) => L < own.start || L >= own.end));
        expect(done.fetched_bytes as number).toBeGreaterThan(0);
        // The host builds the layers after its own into its shard cache (host-standby-builds.ts).
        const hostEnd = before.stages.find((s) => s.peer === 0)!.end;
        const built = await ring.waitStatus((s) => s.standby?.state === 'done', "the host's standby layers", 60_000, 250);
        expect(built.standby!.layers).toEqual([0, 1, 2, 3, 4, 5, 6, 7].filter((L) => L >= hostEnd));
      }
      const loadsBefore = readies(ring.member(survivor).events).length;

      let killedAt = 0;
      const got = await streamCompletion(ring.url, { model: 'standby8', prompt: 'hello world', maxTokens: 64 }, (i) => {
        if (i === 10) {
          killedAt = Date.now();
          ring.signal(victim, 'SIGKILL');
        }
      }, { stallMs: 40_000 });
      expect(got.error, ring.logs()).toBeUndefined();
      expect(got.text, ring.logs()).toBe((await want).text);

      const after = await ring.waitStatus((s) => servingAllReady(s) && (s.recoveries?.length ?? 0) >= 1, 'the ring serving again', 60_000, 250);
      const stage = after.stages.find((s) => s.name === survivor)!;
      // The survivor's range now covers layers the victim ran.
      const victimRange = ranges[0]!;
      expect(stage.start < victimRange.end && stage.end > victimRange.start, JSON.stringify(after.stages)).toBe(true);
      const loads = readies(ring.member(survivor).events);
      expect(loads.length, ring.logs()).toBe(loadsBefore + 1);
      const last = loads.at(-1)!;
      const recovered = ring.hostEvents('recovered')[0]!;
      console.log(`standby ${standby}: kill -> next token ${stallAfter(got.pieces, killedAt)} ms, recovered in ${recovered.duration_ms} ms, survivor ${survivor} ${stage.start}-${stage.end} from ${last.source}, ${last.transferred_bytes} B received, load ${last.load_ms} ms`);
      if (standby) {
        expect(last, ring.logs()).toMatchObject({ source: 'cache', transferred_bytes: 0 });
        expect(recovered.bytes_moved).toBe(0);
      } else {
        expect(last.transferred_bytes as number).toBeGreaterThan(0);
        expect(recovered.bytes_moved).toBe(last.transferred_bytes);
      }
      expect(ring.hostEvents('error')).toEqual([]);
    }, 180_000);
  }
});
