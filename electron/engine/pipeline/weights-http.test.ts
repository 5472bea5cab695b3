import { request } from 'node:http';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { fetchSpans, hashSpans, PartialModel, stageSpans } from './member-weights.js';
import { HostToMemberBody, MemberToHostBody, parsePipelineBody } from './ring-protocol.js';
import { startWeightsHttp, type WeightsHttpServer } from './weights-http.js';

let dir: string;
let model: string;
let bytes: Buffer;
let server: WeightsHttpServer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-weights-http-'));
  model = await testModelPath('stories260K.gguf');
  bytes = await readFile(model);
  server = await startWeightsHttp(model, { host: '127.0.0.1' });
});
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** One raw request (node:http, so any method and header goes out as written). */
function ask(method: string, headers: Record<string, string>, path = '/model.gguf'): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, method, path, headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the host\'s HTTP range server for its model', () => {
  it('names its URL on the bind address and a random token', () => {
    expect(server.urls).toEqual([`http://127.0.0.1:${server.port}/model.gguf`]);
    expect(server.token.length).toBeGreaterThanOrEqual(32);
  });

  it('serves a range inside the file to the token', async () => {
    const got = await ask('GET', { authorization: `Bearer ${server.token}`, range: 'bytes=100-4195' });
    expect(got.status).toBe(206);
    expect(got.headers['content-range']).toBe(`bytes 100-4195/${bytes.length}`);
    expect(got.body.equals(bytes.subarray(100, 4196))).toBe(true);
  });

  it.each([
    ['no token', 'GET', {}, 401],
    ['a wrong token', 'GET', { authorization: 'Bearer not-the-token' }, 403],
    ['a token of another scheme', 'GET', { authorization: 'Basic abc' }, 403],
    ['a range past the file', 'GET', { authorization: 'TOKEN', range: 'RANGE_PAST_END' }, 416],
    ['a reversed range', 'GET', { authorization: 'TOKEN', range: 'bytes=10-5' }, 416],
    ['no range', 'GET', { authorization: 'TOKEN' }, 400],
    ['several ranges', 'GET', { authorization: 'TOKEN', range: 'bytes=0-1,5-6' }, 400],
    ['an open-ended range', 'GET', { authorization: 'TOKEN', range: 'bytes=0-' }, 400],
    ['a POST', 'POST', { authorization: 'TOKEN', range: 'bytes=0-9' }, 405],
    ['a HEAD', 'HEAD', { authorization: 'TOKEN', range: 'bytes=0-9' }, 405],
  ] as const)('refuses %s', async (_what, method, headers: Record<string, string>, status) => {
    const h = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, v === 'TOKEN' ? `Bearer ${server.token}` : v === 'RANGE_PAST_END' ? `bytes=${bytes.length - 10}-${bytes.length}` : v]));
    const got = await ask(method, h);
    expect(got.status).toBe(status);
    if (status === 416) expect(got.headers['content-range']).toBe(`bytes */${bytes.length}`);
    if (status !== 405 || method !== 'HEAD') expect(got.body.includes(bytes.subarray(0, 4))).toBe(false);
  });

  it('refuses any other path', async () => {
    expect((await ask('GET', { authorization: `Bearer ${server.token}`, range: 'bytes=0-9' }, '/etc/passwd')).status).toBe(404);
  });

  it('fills a member\'s partial model through fetchSpans with the token, and not without it', async () => {
    const spans = await hashSpans(model, stageSpans(await openGguf(model), { start: 0, end: 2 }));
    const without = await PartialModel.open(join(dir, 'no-token'), 'f'.repeat(64), bytes.length);
    await expect(fetchSpans(server.urls[0]!, spans, without, () => {})).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
    const partial = await PartialModel.open(join(dir, 'token'), 'f'.repeat(64), bytes.length);
    let fetched = 0;
    await fetchSpans(server.urls[0]!, spans, partial, (n) => (fetched += n), { token: server.token });
    expect(fetched).toBe(spans.reduce((n, s) => n + s.bytes, 0));
    expect(partial.missing(spans)).toEqual([]);
    const stored = await readFile(partial.path);
    for (const s of spans) expect(stored.subarray(s.offset, s.offset + s.bytes).equals(bytes.subarray(s.offset, s.offset + s.bytes))).toBe(true);
  });
});

describe('the weights plan naming the server', () => {
  const plan = { kind: 'weights-plan', epoch: 1, spans: [], http: { urls: ['http://10.0.0.2:4000/model.gguf'], token: 't'.repeat(43) } };
  const code = (f: () => unknown): string | undefined => {
    try {
      f();
      return undefined;
    } catch (err) {
      return isKiwiError(err) ? err.code : 'other';
    }
  };

  it('carries its URLs and token, and refuses other schemes or a short token', () => {
    expect(parsePipelineBody(HostToMemberBody, plan)).toEqual(plan);
    expect(code(() => parsePipelineBody(HostToMemberBody, { ...plan, http: { ...plan.http, urls: ['file:///etc/passwd'] } }))).toBe('RING_PROTOCOL');
    expect(code(() => parsePipelineBody(HostToMemberBody, { ...plan, http: { ...plan.http, token: 'short' } }))).toBe('RING_PROTOCOL');
  });

  it('lets a member report host-http as its source', () => {
    expect(parsePipelineBody(MemberToHostBody, { kind: 'ready', epoch: 1, source: 'host-http', transferredBytes: 5, loadMs: 1 }).kind).toBe('ready');
  });
});
