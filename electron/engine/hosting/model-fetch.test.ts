// Downloading a model to host, against a local HTTP server (never the internet): the file lands in
// the cache under the URL's name with progress and speed, a cancel leaves the partial file that
// the next attempt resumes with a Range request, a complete file is not fetched again, and a
// server's refusal or a bad URL is a clear error. Through the control API: hosting by URL shows
// the download in the status, can be cancelled and resumed, and then hosts the cached file,
// passing the URL on for members.
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionStatus, type ControlEvent } from '../../../common/control-api.js';
import { isKiwiError } from '../errors.js';
import { startControlApi, type ControlApi } from '../server/control-api.js';
import { SessionControl, type HostingRequest, type ModelFetchProgress, type StartHosting } from '../server/control-api-source.js';
import { createHost } from '../session/host.js';
import { startRangeServer } from '../test-support/range-server.js';
import { modelCachePath, modelFetcher, modelFileName, SpeedMeter } from './model-fetch.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function scratch(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-model-fetch-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function body(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) b[i] = (i * 31 + (i >> 8)) & 0xff;
  return b;
}

describe('modelFetcher', () => {
  it('downloads into the cache under the URL\'s file name with progress and speed, then uses the cached file', async () => {
    const data = body(3 * 1024 * 1024 + 17);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const fetcher = modelFetcher({ cacheDir });
    const url = `${server.url}/models/tiny%20model.gguf`;
    expect(fetcher.fileName(url)).toBe('tiny_model.gguf');
    const seen: ModelFetchProgress[] = [];
    const path = await fetcher.fetch(url, (p) => seen.push(p), new AbortController().signal);
    expect(path).toBe(modelCachePath(url, cacheDir));
    expect(path.endsWith('/tiny_model.gguf')).toBe(true);
    expect((await readFile(path)).equals(data)).toBe(true);
    expect(seen.length).toBeGreaterThan(1);
    expect(seen.at(-1)).toMatchObject({ receivedBytes: data.length, totalBytes: data.length, resumed: false });
    for (let i = 1; i < seen.length; i++) expect((seen[i] as ModelFetchProgress).receivedBytes).toBeGreaterThanOrEqual((seen[i - 1] as ModelFetchProgress).receivedBytes);

    // Complete in the cache: no request, progress says it is all there.
    const requests = server.requests.length;
    const again: ModelFetchProgress[] = [];
    expect(await fetcher.fetch(url, (p) => again.push(p), new AbortController().signal)).toBe(path);
    expect(server.requests.length).toBe(requests);
    expect(again).toEqual([{ receivedBytes: data.length, totalBytes: data.length, bytesPerSecond: undefined, resumed: false }]);
  });

  it('leaves the partial file on cancel and resumes it with a Range request', async () => {
    const data = body(4 * 1024 * 1024);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const fetcher = modelFetcher({ cacheDir });
    const url = `${server.url}/m.gguf`;
    const abort = new AbortController();
    let cancelledAt = 0;
    const first = fetcher.fetch(url, (p) => {
      if (cancelledAt === 0 && p.receivedBytes >= 256 * 1024) {
        cancelledAt = p.receivedBytes;
        abort.abort();
      }
    }, abort.signal);
    await expect(first).rejects.toThrow();
    const part = await stat(`${modelCachePath(url, cacheDir)}.part`);
    expect(part.size).toBeGreaterThanOrEqual(cancelledAt);
    expect(part.size).toBeLessThan(data.length);

    const seen: ModelFetchProgress[] = [];
    const path = await fetcher.fetch(url, (p) => seen.push(p), new AbortController().signal);
    expect((await readFile(path)).equals(data)).toBe(true);
    expect(server.requests.at(-1)?.range).toBe(`bytes=${part.size}-`);
    expect(seen[0]?.resumed).toBe(true);
    expect(seen[0]?.receivedBytes).toBeGreaterThan(part.size);
  });

  it('says why when the server refuses or the URL is not one', async () => {
    const server = await startRangeServer({ body: Buffer.alloc(10), status: 404 });
    cleanups.push(() => server.close());
    const fetcher = modelFetcher({ cacheDir: await scratch() });
    const err = await fetcher.fetch(`${server.url}/missing.gguf`, () => undefined, new AbortController().signal).catch((e: unknown) => e);
    expect(isKiwiError(err, 'DOWNLOAD_FAILED')).toBe(true);
    expect((err as Error).message).toMatch(/HTTP 404/);
    expect(() => modelFileName('not a url')).toThrow(/not a URL/);
    expect(() => modelFileName('file:///etc/passwd')).toThrow(/http/);
    expect(modelFileName('https://example.org/')).toBe('model.gguf');
  });
});

describe('SpeedMeter', () => {
  it('measures bytes per second over its recent window', () => {
    const m = new SpeedMeter(1000);
    expect(m.add(0, 0)).toBeUndefined();
    expect(m.add(500, 500)).toBe(1000);
    expect(m.add(1000, 1000)).toBe(1000);
    // A stall: the rate over the last window falls.
    expect(m.add(1000, 2000)).toBeLessThan(1000);
    expect(m.add(1000, 3100)).toBe(0);
  });
});

/** The real HTTP response, its body slowed to one chunk per few ms so a test sees the download run. */
const slowFetch: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  if (res.body === null) return res;
  const reader = res.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { value, done } = await reader.read();
      if (done) return controller.close();
      await new Promise((r) => setTimeout(r, 8));
      controller.enqueue(value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
  return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
};

function call(api: ControlApi, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${api.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${api.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
}

async function until(what: string, api: ControlApi, ok: (s: SessionStatus) => boolean, timeoutMs = 20_000): Promise<SessionStatus> {
  const started = Date.now();
  for (;;) {
    const s = SessionStatus.parse(await (await call(api, 'GET', '/status')).json());
    if (ok(s)) return s;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('hosting a model from its URL through the control API', () => {
  it('shows the download, cancels and resumes it, then hosts the cached file with its URL', async () => {
    const data = body(6 * 1024 * 1024);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const hosted: HostingRequest[] = [];
    // The session alone: serving the file has its own tests (ring-control.test.ts).
    const startHosting: StartHosting = async (req) => {
      hosted.push(req);
      const session = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
      return { session, model: req.model, serving: null, close: () => session.close() };
    };
    const control = new SessionControl({ startHosting, fetchModel: modelFetcher({ cacheDir, fetchImpl: slowFetch }), coalesceMs: 5 });
    const api = await startControlApi({ source: control, staticDir: null });
    cleanups.push(() => api.close(), () => control.close());
    const snapshots: SessionStatus[] = [];
    control.subscribe((e: ControlEvent) => {
      if (e.type === 'status') snapshots.push(e.status);
    });

    expect((await call(api, 'POST', '/session/host', {})).status).toBe(400);
    expect((await call(api, 'POST', '/session/host', { model_url: 'ftp://example.org/m.gguf' })).status).toBe(400);
    expect((await call(api, 'POST', '/session/download/cancel', {})).status).toBe(404);

    const url = `${server.url}/tiny.gguf`;
    const started = await call(api, 'POST', '/session/host', { model_url: url, auto_approve: true });
    expect(started.status).toBe(200);
    expect(SessionStatus.parse(await started.json())).toMatchObject({ role: 'none', download: { url, file: 'tiny.gguf', state: 'downloading' } });
    const running = await until('the download to measure its speed', api, (s) => (s.download?.bytes_per_s ?? 0) > 0);
    expect(running.download?.total_bytes).toBe(data.length);
    expect(running.download?.received_bytes).toBeGreaterThan(0);
    // One thing at a time: no join, no second host while the model downloads.
    expect((await call(api, 'POST', '/session/join', { code: '1-a-b-c', rendezvous: 'ws://127.0.0.1:1' })).status).toBe(409);
    expect((await call(api, 'POST', '/session/host', { model_url: url })).status).toBe(409);

    expect((await call(api, 'POST', '/session/download/cancel', {})).status).toBe(200);
    const cancelled = await until('the cancel', api, (s) => s.download?.state === 'cancelled');
    expect(cancelled.role).toBe('none');
    expect(cancelled.download?.received_bytes).toBeLessThan(data.length);
    expect(hosted).toEqual([]);

    // Again: it resumes from the partial file, then hosts it.
    expect((await call(api, 'POST', '/session/host', { model_url: url, auto_approve: true })).status).toBe(200);
    const hosting = await until('hosting the downloaded model', api, (s) => s.role === 'host');
    expect(hosting.download).toBeNull();
    expect(hosting.model).toBe(modelCachePath(url, cacheDir));
    expect(hosted).toEqual([{ model: modelCachePath(url, cacheDir), model_url: url, auto_approve: true }]);
    expect((await readFile(modelCachePath(url, cacheDir))).equals(data)).toBe(true);
    expect(snapshots.some((s) => s.download?.resumed === true)).toBe(true);
    expect(server.requests.filter((r) => r.range !== undefined).length).toBe(1);
  }, 30_000);

  it('shows a failed download with the server\'s answer and hosts nothing', async () => {
    const server = await startRangeServer({ body: Buffer.alloc(10), status: 403 });
    cleanups.push(() => server.close());
    const control = new SessionControl({ startHosting: () => Promise.reject(new Error('not reached')), fetchModel: modelFetcher({ cacheDir: await scratch() }), coalesceMs: 5 });
    const api = await startControlApi({ source: control, staticDir: null });
    cleanups.push(() => api.close(), () => control.close());
    expect((await call(api, 'POST', '/session/host', { model_url: `${server.url}/m.gguf` })).status).toBe(200);
    const failed = await until('the download to fail', api, (s) => s.download?.state === 'failed');
    expect(failed.role).toBe('none');
    expect(failed.download?.error).toMatchObject({ code: 'DOWNLOAD_FAILED', message: expect.stringMatching(/HTTP 403/) });
  });
});
