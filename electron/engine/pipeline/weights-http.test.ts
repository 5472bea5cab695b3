import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { hashSpans, PartialModel, stageSpans } from './member-weights.js';
import { HostToMemberBody, MemberToHostBody, parsePipelineBody } from './ring-protocol.js';
import { fetchSpans } from './span-fetch.js';
import { startWeightsHttp, type WeightsHttpServer } from './weights-http.js';
import { BufferPool, GrantTable, rangeServer, READ_BYTES, READS_AHEAD, tokenKey } from './weights-http-serve.js';

let dir: string;
let model: string;
let bytes: Buffer;
let server: WeightsHttpServer;
/** A member granted the whole file (the refusals below are about everything but the spans). */
let token: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-weights-http-'));
  model = await testModelPath('stories260K.gguf');
  bytes = await readFile(model);
  server = await startWeightsHttp(model, { host: '127.0.0.1' });
  token = await server.grant('whole-file', [{ offset: 0, bytes: bytes.length }]);
});
afterAll(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

/** One raw request (node:http, so any method and header goes out as written). */
function ask(method: string, headers: Record<string, string>, path = '/model.gguf', to: WeightsHttpServer = server): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: to.port, method, path, headers }, (res) => {
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
  it('names its URL on the bind address and gives each member its own random token', async () => {
    expect(server.urls).toEqual([`http://127.0.0.1:${server.port}/model.gguf`]);
    // On its own thread: the host's stage builds and steps do not hold up a transfer.
    expect(server.offThread).toBe(true);
    expect(token.length).toBeGreaterThanOrEqual(32);
    const other = await server.grant('another', [{ offset: 0, bytes: 10 }]);
    expect(other).not.toBe(token);
    expect(await server.grant('another', [{ offset: 0, bytes: 20 }])).toBe(other);
    await server.grant('a third', [{ offset: 0, bytes: 10 }]);
    await server.revoke('another');
    expect(server.granted()).toEqual(['whole-file', 'a third']);
    // A new ring without it: planned out, revoked.
    await server.retain(['whole-file', 'ada']);
    expect(server.granted()).toEqual(['whole-file']);
  });

  it('serves a range inside the file to the token', async () => {
    const got = await ask('GET', { authorization: `Bearer ${token}`, range: 'bytes=100-4195' });
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
    const h = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, v === 'TOKEN' ? `Bearer ${token}` : v === 'RANGE_PAST_END' ? `bytes=${bytes.length - 10}-${bytes.length}` : v]));
    const got = await ask(method, h);
    expect(got.status).toBe(status);
    if (status === 416) expect(got.headers['content-range']).toBe(`bytes */${bytes.length}`);
    if (status !== 405 || method !== 'HEAD') expect(got.body.includes(bytes.subarray(0, 4))).toBe(false);
  });

  it('refuses any other path', async () => {
    expect((await ask('GET', { authorization: `Bearer ${token}`, range: 'bytes=0-9' }, '/etc/passwd')).status).toBe(404);
  });

  it('fills a member\'s partial model through fetchSpans with the token, and not without it', async () => {
    const spans = await hashSpans(model, stageSpans(await openGguf(model), { start: 0, end: 2 }));
    const without = await PartialModel.open(join(dir, 'no-token'), 'f'.repeat(64), bytes.length);
    await expect(fetchSpans(server.urls[0]!, spans, without, () => {})).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED'));
    const partial = await PartialModel.open(join(dir, 'token'), 'f'.repeat(64), bytes.length);
    let fetched = 0;
    await fetchSpans(server.urls[0]!, spans, partial, (n) => (fetched += n), { token });
    expect(fetched).toBe(spans.reduce((n, s) => n + s.bytes, 0));
    expect(partial.missing(spans)).toEqual([]);
    const stored = await readFile(partial.path);
    for (const s of spans) expect(stored.subarray(s.offset, s.offset + s.bytes).equals(bytes.subarray(s.offset, s.offset + s.bytes))).toBe(true);
  });
});

describe('each member\'s own token', () => {
  it('reads only the spans of its assignment, and what the host allows later', async () => {
    const file = await openGguf(model);
    const own = await hashSpans(model, stageSpans(file, { start: 0, end: 1 }));
    const other = stageSpans(file, { start: 1, end: 2 }).filter((s) => !own.some((o) => o.offset === s.offset));
    const t = await server.grant('ada', own);
    const range = (s: { offset: number; bytes: number }, from = 0, to = s.bytes - 1): string => `bytes=${s.offset + from}-${s.offset + to}`;
    const layer = own.find((s) => s.offset >= file.dataOffset)!;
    expect((await ask('GET', { authorization: `Bearer ${t}`, range: range(layer) })).status).toBe(206);
    expect((await ask('GET', { authorization: `Bearer ${t}`, range: range(layer, 10, 99) })).status).toBe(206);
    const refused = await ask('GET', { authorization: `Bearer ${t}`, range: range(other[0]!) });
    expect(refused.status).toBe(403);
    expect(refused.body.toString()).toContain('not among this member\'s layers');
    // Across the end of its span into the next: refused too.
    expect((await ask('GET', { authorization: `Bearer ${t}`, range: range(layer, layer.bytes - 4, layer.bytes + 4) })).status).toBe(403);
    // fetchSpans of another layer fails with the refusal; the hook for standby layers then allows it.
    const otherHashed = await hashSpans(model, other);
    const partial = await PartialModel.open(join(dir, 'ada'), 'a'.repeat(64), bytes.length);
    await expect(fetchSpans(server.urls[0]!, otherHashed, partial, () => {}, { token: t })).rejects.toSatisfy((e) => isKiwiError(e, 'WEIGHTS_TRANSFER_FAILED') && e.message.includes('HTTP 403'));
    await server.allow('ada', other);
    await fetchSpans(server.urls[0]!, otherHashed, partial, () => {}, { token: t });
    expect(partial.missing(otherHashed)).toEqual([]);
    // A new assignment replaces the grant: the same token, only the new spans.
    expect(await server.grant('ada', other)).toBe(t);
    expect((await ask('GET', { authorization: `Bearer ${t}`, range: range(layer) })).status).toBe(403);
    expect((await ask('GET', { authorization: `Bearer ${t}`, range: range(other[0]!) })).status).toBe(206);
    await server.revoke('ada');
  });

  it('refuses a revoked token, and ends its responses in flight', async () => {
    const big = join(dir, 'big.bin');
    const size = 64 << 20;
    await writeFile(big, Buffer.alloc(size, 7));
    const own = await startWeightsHttp(big, { host: '127.0.0.1' });
    try {
      const t = await own.grant('bob', [{ offset: 0, bytes: size }]);
      expect((await ask('GET', { authorization: `Bearer ${t}`, range: 'bytes=0-9' }, '/model.gguf', own)).status).toBe(206);
      // A response paused by its reader after the headers: the host cannot finish it before the revocation.
      const ended = await new Promise<{ status: number; received: number }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: own.port, path: '/model.gguf', headers: { authorization: `Bearer ${t}`, range: `bytes=0-${size - 1}` } }, (res) => {
          res.pause();
          let received = 0;
          res.on('data', (c: Buffer) => (received += c.length));
          res.on('close', () => resolve({ status: res.statusCode ?? 0, received }));
          void own.revoke('bob').then(() => res.resume());
        });
        req.on('error', reject);
        req.end();
      });
      expect(ended.status).toBe(206);
      expect(ended.received).toBeLessThan(size);
      expect(own.granted()).toEqual([]);
      const after = await ask('GET', { authorization: `Bearer ${t}`, range: 'bytes=0-9' }, '/model.gguf', own);
      expect(after.status).toBe(403);
      expect(after.body.toString()).toContain('no longer');
    } finally {
      await own.close();
    }
  });
});

describe('the range server on the host\'s own thread (where no worker can start)', () => {
  it('serves a member\'s spans and refuses the rest and a revoked token alike', async () => {
    const here = await startWeightsHttp(model, { host: '127.0.0.1', inThread: true });
    try {
      expect(here.offThread).toBe(false);
      const t = await here.grant('cy', [{ offset: 100, bytes: 1000 }]);
      const got = await ask('GET', { authorization: `Bearer ${t}`, range: 'bytes=100-1099' }, '/model.gguf', here);
      expect(got.status).toBe(206);
      expect(got.body.equals(bytes.subarray(100, 1100))).toBe(true);
      expect((await ask('GET', { authorization: `Bearer ${t}`, range: 'bytes=100-1100' }, '/model.gguf', here)).status).toBe(403);
      await here.revoke('cy');
      expect((await ask('GET', { authorization: `Bearer ${t}`, range: 'bytes=100-1099' }, '/model.gguf', here)).status).toBe(403);
    } finally {
      await here.close();
    }
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

describe('the range server\'s reads', () => {
  it('sends a range of several reads exactly, reusing READS_AHEAD buffers across responses (also after a cut one)', async () => {
    const file = join(dir, 'reads.bin');
    const size = 5 * READ_BYTES + 123;
    const content = randomBytes(size);
    await writeFile(file, content);
    const table = new GrantTable();
    table.set(tokenKey('reader'), [{ offset: 0, bytes: size }]);
    const pool = new BufferPool();
    const srv = rangeServer(file, size, table, pool);
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    const port = (srv.address() as AddressInfo).port;
    const get = (start: number, end: number, cutAfter?: number): Promise<Buffer> => new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/model.gguf', headers: { authorization: 'Bearer reader', range: `bytes=${start}-${end}` } }, (res) => {
        const parts: Buffer[] = [];
        let got = 0;
        res.on('data', (c: Buffer) => {
          parts.push(c);
          got += c.length;
          if (cutAfter !== undefined && got >= cutAfter) req.destroy();
        });
        res.on('close', () => resolve(Buffer.concat(parts)));
      });
      req.on('error', (err) => (cutAfter !== undefined ? undefined : reject(err)));
      req.end();
    });
    try {
      const a = await get(7, size - 2);
      expect(a.equals(content.subarray(7, size - 1))).toBe(true);
      expect((await get(0, size - 1, READ_BYTES)).length).toBeLessThan(size);
      const b = await get(READ_BYTES - 5, 3 * READ_BYTES + 9);
      expect(b.equals(content.subarray(READ_BYTES - 5, 3 * READ_BYTES + 10))).toBe(true);
      // A buffer per read would be at least 10 by now; the cut response may keep the READS_AHEAD it had.
      expect(pool.allocated).toBeLessThanOrEqual(2 * READS_AHEAD);
    } finally {
      srv.closeAllConnections();
      await new Promise((resolve) => srv.close(resolve));
    }
  });
});
