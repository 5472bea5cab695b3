// The host's standby layers (host-standby-builds.ts): the layers after its blocks that fit its disk
// budget are built into the shard cache, nearest first, and a stage grown over them computes what
// a fresh one does; while the ring is busy no build starts, and a re-plan's stop() ends the run.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { modelFingerprint, ShardCache } from '../runtime/shard-cache.js';
import { Stage } from '../runtime/stage.js';
import { HostStandbyBuilds, type HostStandbyStatus } from './host-standby-builds.js';
import { stageOutput } from '../test-support/stage-output.js';

let dir: string;
let file: GgufFile;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-host-standby-'));
  file = await openGguf(await testModelPath('stories260K.gguf'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Polls the builds' status until `done` (every step of a build is awaited work, not a timer). */
async function until(builds: HostStandbyBuilds, state: HostStandbyStatus['state']): Promise<HostStandbyStatus> {
  for (;;) {
    const s = builds.status();
    if (s.state === state) return s;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("the host's standby layers", () => {
  it('builds the layers after its blocks that fit its budget, nearest first, and a stage grown over them computes as a fresh one', async () => {
    const cache = new ShardCache(join(dir, 'built'));
    const sizes = modelSizesFromGguf(file);
    const shape = await modelShapeFromGguf(file, { maxPositions: 64 });
    // Two built layers fit, not three.
    const budgetBytes = Math.floor(2.5 * (sizes.blockResidentBytes ?? sizes.blockBytes));
    const builds = new HostStandbyBuilds({ budgetBytes, cache, idleMs: 0 }, () => undefined, (err) => { throw err; });
    builds.start(file, shape, 2);
    expect(await until(builds, 'done')).toEqual({ budgetBytes, state: 'done', layers: [2, 3] });
    expect([...(await cache.builtLayers(await modelFingerprint(file))).keys()].sort()).toEqual([2, 3]);

    // The re-plan that grows the host's blocks to 0-4 (opened beside the kept 0-2 as 2-4) uses them.
    const grown = await Stage.open(file, shape, { start: 2, end: 4, head: false }, { cache, threads: 1, replayInputs: true });
    const fresh = await Stage.open(file, shape, { start: 2, end: 4, head: false }, { threads: 1, replayInputs: true });
    try {
      const hidden = Float32Array.from({ length: 3 * shape.hidden }, (_, i) => Math.sin(i));
      expect(await stageOutput(grown, hidden, 3)).toEqual(await stageOutput(fresh, hidden, 3));
    } finally {
      await grown.dispose();
      await fresh.dispose();
    }
  });

  it('starts no build while the ring runs steps, and stop() ends the run', async () => {
    const cache = new ShardCache(join(dir, 'busy'));
    const shape = await modelShapeFromGguf(file, { maxPositions: 64 });
    // The ring is never quiet: its last step is always now.
    const builds = new HostStandbyBuilds({ budgetBytes: 2 ** 30, cache, idleMs: 60_000 }, () => performance.now(), (err) => { throw err; });
    builds.start(file, shape, 1);
    expect(builds.status()).toMatchObject({ state: 'building', layers: [] });
    await builds.stop();
    expect(builds.status()).toMatchObject({ state: 'waiting', layers: [] });
    expect((await cache.builtLayers(await modelFingerprint(file))).size).toBe(0);
  });
});
