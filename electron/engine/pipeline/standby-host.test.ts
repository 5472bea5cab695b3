// The host's side of standby layers (standby-host.ts) with its real range server (weights-http.ts):
// a member's token reads the standby spans picked for it, nothing else beyond its stage.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { SpanHashes, stageSpans, type Span } from './member-weights.js';
import type { HostToMemberBody, StandbyPlan } from './ring-protocol.js';
import { StandbyHost } from './standby-host.js';
import { standbyLayerSpans } from './standby.js';
import { startWeightsHttp, type WeightsHttpServer } from './weights-http.js';

let file: GgufFile;
let server: WeightsHttpServer;
let hashes: SpanHashes;
beforeAll(async () => {
  const model = await testModelPath('stories260K.gguf');
  file = await openGguf(model);
  hashes = new SpanHashes(model);
  server = await startWeightsHttp(model, { host: '127.0.0.1', inThread: true });
});
afterAll(() => server.close());

function status(token: string, s: Span): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path: '/model.gguf', headers: { authorization: `Bearer ${token}`, range: `bytes=${s.offset}-${s.offset + s.bytes - 1}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the host plans standby layers for a member', () => {
  it('lets the member\'s token read exactly the standby spans it picked, and records what the member holds', async () => {
    const range = { start: 2, end: 3 };
    const token = await server.grant('ada', stageSpans(file, range));
    const sent: Array<{ id: string; body: HostToMemberBody }> = [];
    let serving = false;
    let epoch = 3;
    const host = new StandbyHost({
      file: () => file, blockCount: () => 5, hash: (spans) => hashes.hash(spans), epoch: () => epoch, serving: () => serving,
      stageOf: (id) => (id === 'ada' ? range : undefined), hostEnd: () => 1, http: () => ({ tokens: server }), send: (id, body) => sent.push({ id, body }),
    });
    const layer = (L: number): number => file.tensors.filter((t) => t.name.startsWith(`blk.${L}.`)).reduce((n, t) => n + t.byteLength, 0);
    // Room for two layers: 3 then 1 (the host's layer 0 would come last).
    await host.onMessage('ada', { kind: 'standby-request', epoch: 3, budgetBytes: layer(3) + layer(1) });
    expect(sent, 'nothing before the ring serves').toEqual([]);
    expect(await status(token, standbyLayerSpans(file, range, 3)[0]!)).toBe(403);
    serving = true;
    await host.flush();
    expect(sent.map((s) => s.id)).toEqual(['ada']);
    const plan = sent[0]!.body as StandbyPlan;
    expect(plan.kind).toBe('standby-plan');
    expect(plan.layers.map((l) => l.layer)).toEqual([3, 1]);
    expect(plan.layers[0]!.spans).toEqual(await hashes.hash(standbyLayerSpans(file, range, 3)));
    for (const l of plan.layers) for (const s of l.spans) expect(await status(token, s), `layer ${l.layer}`).toBe(206);
    // Layers it was not given (4, and the host's 0 with the embedding) stay refused.
    for (const L of [4, 0]) for (const s of standbyLayerSpans(file, range, L)) expect(await status(token, s), `layer ${L}`).toBe(403);
    // A request of an older epoch gets nothing; another member's token reads none of ada's.
    epoch = 4;
    await host.onMessage('ada', { kind: 'standby-request', epoch: 3, budgetBytes: 1e9 });
    expect(sent.length).toBe(1);
    const bob = await server.grant('bob', stageSpans(file, { start: 4, end: 5 }));
    expect(await status(bob, plan.layers[0]!.spans[0]!)).toBe(403);
    await host.onMessage('ada', { kind: 'holds', ranges: [{ start: 1, end: 4 }] });
    expect(host.holds.get('ada')).toEqual([{ start: 1, end: 4 }]);
    host.forget('ada');
    expect(host.holds.has('ada')).toBe(false);
  });
});
