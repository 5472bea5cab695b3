// A member's standby layers (standby-member.ts) against the host's real range server: it fetches
// what the host names within its own budget, verifies it, reports what it holds, and releases
// standby layers a later plan no longer names; with a shard cache it builds them there, frees their
// raw bytes, and a stage of those layers then opens from the cache.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { modelFingerprint, ShardCache } from '../runtime/shard-cache.js';
import { Stage } from '../runtime/stage.js';
import { partialCacheSource } from './member-layers.js';
import { PartialModel, SpanHashes, stageSpans } from './member-weights.js';
import type { Assign, MemberToHostBody, StandbyPlan, WeightsPlan } from './ring-protocol.js';
import { fetchSpans } from './span-fetch.js';
import { StandbyKeeper, type StandbyStatus } from './standby-member.js';
import { standbyLayerSpans } from './standby.js';
import { startWeightsHttp, type WeightsHttpServer } from './weights-http.js';
import { stageOutput } from '../test-support/stage-output.js';

let dir: string;
let file: GgufFile;
let server: WeightsHttpServer;
let hashes: SpanHashes;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-standby-member-'));
  const model = await testModelPath('stories260K.gguf');
  file = await openGguf(model);
  hashes = new SpanHashes(model);
  server = await startWeightsHttp(model, { host: '127.0.0.1', inThread: true });
});
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe('a member keeps standby layers', () => {
  it('fetches the named layers within its own budget, says when its holds change, and releases a layer the next plan drops', async () => {
    const range = { start: 2, end: 3 };
    const fingerprint = await modelFingerprint(file);
    const spans = await hashes.hash(stageSpans(file, range));
    const token = await server.grant('ada', spans);
    // The stage's own weights, as a load leaves them.
    const partial = await PartialModel.open(dir, fingerprint, file.fileSize);
    await fetchSpans(server.urls[0]!, spans, partial, () => {}, { token });
    const standbyOf = async (layers: number[]): Promise<StandbyPlan['layers']> => Promise.all(layers.map(async (layer) => ({ layer, spans: await hashes.hash(standbyLayerSpans(file, range, layer)) })));
    const all = await standbyOf([3, 1, 4, 0]);
    await server.allow('ada', all.flatMap((l) => l.spans));
    const bytes = (l: StandbyPlan['layers'][number]): number => l.spans.reduce((n, s) => n + s.bytes, 0);

    const sent: MemberToHostBody[] = [];
    const heldSeen: number[][] = [];
    let finished: (s: StandbyStatus) => void = () => {};
    const keeper = new StandbyKeeper({ budgetBytes: bytes(all[0]!) + bytes(all[1]!), weightsDir: dir, rateBytesPerSecond: 1e12 }, {
      send: (b) => sent.push(b), heldChanged: () => heldSeen.push(keeper.status().layers), done: (s) => finished(s), warning: (err) => { throw err; },
    });
    const a = { kind: 'assign', epoch: 1, ...range, model: { fingerprint, name: 'stories260K.gguf', fileBytes: file.fileSize } } as Assign;
    const plan: WeightsPlan = { kind: 'weights-plan', epoch: 1, spans, http: { urls: server.urls, token } };
    keeper.ready(a, plan);
    await new Promise((resolve) => setImmediate(resolve)); // the request follows a look at the model's sizes
    expect(sent).toEqual([{ kind: 'standby-request', epoch: 1, budgetBytes: bytes(all[0]!) + bytes(all[1]!) }]);
    // The host names four layers; two fit this member's budget.
    const first = await new Promise<StandbyStatus>((resolve) => {
      finished = resolve;
      keeper.plan({ kind: 'standby-plan', epoch: 1, layers: all });
    });
    expect(first).toMatchObject({ state: 'done', layers: [1, 3], heldBytes: bytes(all[0]!) + bytes(all[1]!), fetchedBytes: bytes(all[0]!) + bytes(all[1]!) });
    // The member hears of each layer as it lands (ring-member.ts tells the host).
    expect(heldSeen).toEqual([[], [3], [1, 3]]);
    const onDisk = await PartialModel.open(dir, fingerprint, file.fileSize);
    for (const l of all.slice(0, 2)) for (const s of l.spans) expect(onDisk.holds(s)).toBe(true);
    for (const s of all[2]!.spans) expect(onDisk.holds(s)).toBe(false);

    // A plan of the next epoch without layer 1: it leaves the disk; layer 3 is not fetched again.
    const a2 = { ...a, epoch: 2 };
    await keeper.pause();
    keeper.ready(a2, { ...plan, epoch: 2 });
    const second = await new Promise<StandbyStatus>((resolve) => {
      finished = resolve;
      keeper.plan({ kind: 'standby-plan', epoch: 2, layers: [all[0]!] });
    });
    expect(second).toMatchObject({ layers: [3], fetchedBytes: first.fetchedBytes });
    const after = await PartialModel.open(dir, fingerprint, file.fileSize);
    for (const s of all[1]!.spans) expect(after.holds(s), 'layer 1 released').toBe(process.platform !== 'linux');
    for (const s of all[0]!.spans) expect(after.holds(s)).toBe(true);
    // A plan of another epoch is ignored.
    keeper.plan({ kind: 'standby-plan', epoch: 1, layers: all });
    expect(keeper.status().state).toBe('done');
  });

  it('builds its standby layers into the shard cache and frees their raw bytes; a stage of them opens from the cache and computes what the model does', async () => {
    const range = { start: 0, end: 1 };
    const weightsDir = join(dir, 'built');
    const cache = new ShardCache(join(dir, 'built-shards'));
    const fingerprint = await modelFingerprint(file);
    const spans = await hashes.hash(stageSpans(file, range));
    const token = await server.grant('bo', spans);
    await fetchSpans(server.urls[0]!, spans, await PartialModel.open(weightsDir, fingerprint, file.fileSize), () => {}, { token });
    const layers = await Promise.all([1, 2].map(async (layer) => ({ layer, spans: await hashes.hash(standbyLayerSpans(file, range, layer)) })));
    await server.allow('bo', layers.flatMap((l) => l.spans));
    let finished: (s: StandbyStatus) => void = () => {};
    const keeper = new StandbyKeeper({ budgetBytes: 2 ** 30, weightsDir, cache, rateBytesPerSecond: 1e12 }, {
      send: () => {}, heldChanged: () => {}, done: (st) => finished(st), warning: (err) => { throw err; },
    });
    const a = { kind: 'assign', epoch: 1, ...range, maxPositions: 64, model: { fingerprint, name: 'stories260K.gguf', fileBytes: file.fileSize } } as Assign;
    keeper.ready(a, { kind: 'weights-plan', epoch: 1, spans, http: { urls: server.urls, token } });
    const done = await new Promise<StandbyStatus>((resolve) => {
      finished = resolve;
      keeper.plan({ kind: 'standby-plan', epoch: 1, layers });
    });
    expect(done).toMatchObject({ state: 'done', layers: [1, 2] });
    expect([...(await cache.builtLayers(fingerprint)).keys()].sort()).toEqual([1, 2]);
    const partial = await PartialModel.open(weightsDir, fingerprint, file.fileSize);
    for (const l of layers) for (const s of l.spans) expect(partial.holds(s), `layer ${l.layer}'s raw bytes released`).toBe(process.platform !== 'linux');

    // A re-plan that hands the member layers 1-2: with their raw bytes gone (Linux) the stage opens
    // only from the built layers (else 'neither built nor readable'), and computes the model's results.
    const own = await openGguf(partial.path);
    const shape = await modelShapeFromGguf(own, { maxPositions: 64 });
    const standby = await Stage.open(own, shape, { start: 1, end: 3, head: false }, { cache, threads: 1, cacheSource: partialCacheSource(own, layers.flatMap((l) => l.spans), (s) => partial.holds(s)) });
    const fresh = await Stage.open(file, await modelShapeFromGguf(file, { maxPositions: 64 }), { start: 1, end: 3, head: false }, { threads: 1 });
    try {
      const hidden = Float32Array.from({ length: 3 * shape.hidden }, (_, i) => Math.sin(i));
      expect(await stageOutput(standby, hidden, 3)).toEqual(await stageOutput(fresh, hidden, 3));
    } finally {
      await standby.dispose();
      await fresh.dispose();
    }
  });
});
