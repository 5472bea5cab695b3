// Downloading a model to host, against local HTTP servers (never the internet): the file lands in
// the cache under the URL's name with progress and speed, a cancel leaves the partial file that
// the next attempt resumes with a Range request, a checked cache entry is not fetched again, and a
// server's refusal or a bad URL is a clear error. Hostile or broken servers: an endless body
// without a size, a body that is not GGUF, a wrong sha256, redirects to other hosts or in loops;
// none of them leaves a cache entry, and a damaged entry is fetched again. Files an older Kiwi
// saved under another name are found. Through the control API: hosting by URL shows the download
// in the status, can be cancelled and resumed, and then hosts the cached file, passing the URL on.
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionStatus, type ControlEvent } from '../../../common/control-api.js';
import { isKiwiError } from '../errors.js';
import { defaultModelPath } from '../paths.js';
import { startControlApi, type ControlApi } from '../server/control-api.js';
import { SessionControl, type HostingRequest, type ModelFetchProgress, type StartHosting } from './session-control.js';
import { createHost } from '../session/host.js';
import { startRangeServer } from '../test-support/range-server.js';
import { fetchModel, MAX_MODEL_REDIRECTS, modelCachePath, modelFetcher, modelFileName, redirectRefusal, SpeedMeter } from './model-fetch.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function scratch(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-model-fetch-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

const stories = await readFile(defaultModelPath() ?? 'models/stories260K.gguf');

/** A valid GGUF of `bytes` bytes: the embedded stories260K followed by filler (tensors all lie inside). */
function body(bytes: number): Buffer {
  const b = Buffer.alloc(Math.max(bytes, stories.length));
  stories.copy(b);
  for (let i = stories.length; i < b.length; i++) b[i] = (i * 31 + (i >> 8)) & 0xff;
  return b;
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** A loopback server answering every request with `handle`; `hits` counts them. */
async function serve(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; hits: () => number }> {
  let hits = 0;
  const server = createServer((req, res) => {
    hits++;
    handle(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits: () => hits };
}

async function failure(p: Promise<unknown>): Promise<Error> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(Error);
  return err as Error;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
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
    // Nothing but the entry and its record is left in its folder.
    expect((await readdir(dirname(path))).sort()).toEqual(['tiny_model.gguf', 'tiny_model.gguf.entry.json']);

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
    expect(await exists(modelCachePath(url, cacheDir))).toBe(false);
    const part = await stat(`${modelCachePath(url, cacheDir)}.download.part`);
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

describe('fetchModel against hostile or broken servers', () => {
  it('refuses an endless body that announces no size, and keeps nothing', async () => {
    let sent = 0;
    const server = await serve((_req, res) => {
      // Chunked transfer encoding, no Content-Length, and it never ends.
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 7);
      const pump = (): void => {
        while (!res.destroyed && res.write(chunk)) sent += chunk.length;
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    const cacheDir = await scratch();
    const url = `${server.url}/endless.gguf`;
    const err = await failure(fetchModel(url, { cacheDir }));
    expect(isKiwiError(err, 'DOWNLOAD_FAILED')).toBe(true);
    expect(err.message).toMatch(/does not say how big the file is/);
    expect(await exists(modelCachePath(url, cacheDir))).toBe(false);
    expect(sent).toBeLessThan(64 * 1024 * 1024);
  });

  it('keeps no file that is not a GGUF model, and asks the server again next time', async () => {
    const junk = Buffer.alloc(200_000, 0x41);
    const server = await startRangeServer({ body: junk });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const url = `${server.url}/fake.gguf`;
    const err = await failure(fetchModel(url, { cacheDir }));
    expect(isKiwiError(err, 'GGUF_INVALID')).toBe(true);
    expect(err.message).toMatch(/not a usable GGUF model/);
    expect(await readdir(dirname(modelCachePath(url, cacheDir)))).toEqual([]);
    const before = server.requests.length;
    await failure(fetchModel(url, { cacheDir }));
    expect(server.requests.length).toBe(before + 1);
  });

  it('checks the expected sha256: a match is kept and recorded, a mismatch keeps nothing', async () => {
    const data = body(1_500_000);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const url = `${server.url}/pinned.gguf`;
    const wrong = await failure(fetchModel(url, { cacheDir, sha256: '0'.repeat(64) }));
    expect(isKiwiError(wrong, 'CHECKSUM_MISMATCH')).toBe(true);
    expect(await readdir(dirname(modelCachePath(url, cacheDir)))).toEqual([]);
    await expect(fetchModel(url, { cacheDir, sha256: 'abc' })).rejects.toThrow(/64 hex digits/);

    const got = await fetchModel(url, { cacheDir, sha256: sha256(data).toUpperCase() });
    expect(got).toEqual({ path: modelCachePath(url, cacheDir), bytes: data.length, downloaded: true });
    const entry = JSON.parse(await readFile(`${got.path}.entry.json`, 'utf8')) as { sha256: string; bytes: number };
    expect(entry).toMatchObject({ sha256: sha256(data), bytes: data.length });
    const before = server.requests.length;
    expect((await fetchModel(url, { cacheDir, sha256: sha256(data) })).downloaded).toBe(false);
    expect(server.requests.length).toBe(before);
  });

  it('downloads a damaged cache entry again: truncated, resized, rewritten with other bytes, or not the expected sha256', async () => {
    const data = body(1_300_000);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const url = `${server.url}/damaged.gguf`;
    const { path } = await fetchModel(url, { cacheDir });
    const damage: Array<{ how: string; apply: () => Promise<void>; sha256?: string; reason: RegExp }> = [
      { how: 'truncated inside its tensors', apply: () => truncate(path, 100_000), reason: /100000 bytes where 1300000 were downloaded/ },
      { how: 'grown', apply: () => writeFile(path, Buffer.concat([data, Buffer.alloc(10)])), reason: /bytes where 1300000 were downloaded/ },
      { how: 'not a GGUF', apply: () => writeFile(path, Buffer.alloc(data.length, 1)), reason: /GGUF/ },
      { how: 'another file than pinned', apply: async () => undefined, sha256: 'f'.repeat(64), reason: /expected f{64}/ },
    ];
    for (const d of damage) {
      await d.apply();
      const notices: string[] = [];
      const before = server.requests.length;
      const run = fetchModel(url, { cacheDir, onNotice: (m) => notices.push(m), ...(d.sha256 !== undefined ? { sha256: d.sha256 } : {}) });
      if (d.sha256 === undefined) {
        expect((await run).downloaded, d.how).toBe(true);
        expect((await readFile(path)).equals(data), d.how).toBe(true);
      } else {
        // Fetched again, and the server's file is still not the pinned one.
        expect(isKiwiError(await failure(run), 'CHECKSUM_MISMATCH'), d.how).toBe(true);
      }
      expect(server.requests.length, d.how).toBe(before + 1);
      expect(notices.join('\n'), d.how).toMatch(d.reason);
    }
  });

  it('follows a redirect on the same server, refuses one to another host over plain http and loops past the cap', async () => {
    const data = body(1_200_000);
    const target = await startRangeServer({ body: data });
    cleanups.push(() => target.close());
    const cacheDir = await scratch();
    // The range server redirects /redirect to /file on itself.
    expect((await fetchModel(`${target.url}/redirect`, { cacheDir })).downloaded).toBe(true);

    // Another host (localhost is not 127.0.0.1's origin) over http: refused before any byte of it is asked for.
    const other = target.url.replace('127.0.0.1', 'localhost');
    const away = await serve((_req, res) => res.writeHead(302, { location: `${other}/file.gguf` }).end());
    const requests = target.requests.length;
    const err = await failure(fetchModel(`${away.url}/m.gguf`, { cacheDir }));
    expect(isKiwiError(err, 'DOWNLOAD_FAILED')).toBe(true);
    expect(err.message).toMatch(/another host over plain http/);
    expect(target.requests.length).toBe(requests);

    const loop = await serve((req, res) => res.writeHead(302, { location: `/hop${req.url ?? ''}` }).end());
    const looped = await failure(fetchModel(`${loop.url}/m.gguf`, { cacheDir }));
    expect(looped.message).toMatch(new RegExp(`more than ${MAX_MODEL_REDIRECTS} times`));
    expect(loop.hits()).toBe(MAX_MODEL_REDIRECTS + 1);
  });

  it('redirect policy: https may go to another https host (a CDN), never down to http', () => {
    const u = (s: string): URL => new URL(s);
    expect(redirectRefusal(u('https://huggingface.co/a/resolve/main/m.gguf'), u('https://cdn-lfs.hf.co/x?sig=1'))).toBeUndefined();
    expect(redirectRefusal(u('http://127.0.0.1:1/a'), u('http://127.0.0.1:1/b'))).toBeUndefined();
    expect(redirectRefusal(u('http://mirror.lan/a'), u('https://cdn.example/b'))).toBeUndefined();
    expect(redirectRefusal(u('https://huggingface.co/a'), u('http://huggingface.co/a'))).toMatch(/https to plain http/);
    expect(redirectRefusal(u('http://a.example/a'), u('http://b.example/a'))).toMatch(/another host over plain http/);
    expect(redirectRefusal(u('https://a.example/a'), u('file:///etc/passwd'))).toMatch(/file:/);
  });

  it('finds a file an older kiwi host --model-url saved under its undecoded name, without fetching it again', async () => {
    const data = body(1_200_000);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const url = `${server.url}/files/my%20model.gguf`;
    const dest = modelCachePath(url, cacheDir);
    expect(dest.endsWith('/my_model.gguf')).toBe(true);
    const legacy = join(dirname(dest), 'my_20model.gguf');
    await mkdir(dirname(dest), { recursive: true });
    await writeFile(legacy, data);
    const notices: string[] = [];
    const got = await fetchModel(url, { cacheDir, onNotice: (m) => notices.push(m) });
    expect(got).toEqual({ path: dest, bytes: data.length, downloaded: false });
    expect(server.requests).toEqual([]);
    expect(await exists(legacy)).toBe(false);
    expect(notices.join('\n')).toMatch(/my_20model\.gguf/);
  });

  it.each([
    ['kiwi host --model-url', (dest: string) => join(dirname(dest), 'my_20model.gguf.part')],
    ['app', (dest: string) => `${dest}.part`],
  ])('resumes a partial download an older %s left under its own name instead of starting again', async (_who, partName) => {
    const data = body(1_200_000);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const url = `${server.url}/files/my%20model.gguf`;
    const dest = modelCachePath(url, cacheDir);
    const half = 400_000;
    await mkdir(dirname(dest), { recursive: true });
    await writeFile(partName(dest), data.subarray(0, half));
    const got = await fetchModel(url, { cacheDir });
    expect(got).toEqual({ path: dest, bytes: data.length, downloaded: true });
    expect((await readFile(dest)).equals(data)).toBe(true);
    expect(server.requests.map((r) => r.range)).toEqual([`bytes=${half}-`]);
    expect(await exists(partName(dest))).toBe(false);
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

/** A SessionControl that downloads into `cacheDir` and hosts the session alone, recording what it was asked to host. */
async function downloadingControl(cacheDir: string, fetchImpl?: typeof fetch): Promise<{ api: ControlApi; control: SessionControl; hosted: HostingRequest[] }> {
  const hosted: HostingRequest[] = [];
  // The session alone: serving the file has its own tests (ring-control.test.ts).
  const startHosting: StartHosting = async (req) => {
    hosted.push(req);
    const session = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
    return { session, model: req.model, serving: null, close: () => session.close() };
  };
  const control = new SessionControl({ startHosting, fetchModel: modelFetcher({ cacheDir, ...(fetchImpl !== undefined ? { fetchImpl } : {}) }), coalesceMs: 5 });
  const api = await startControlApi({ source: control, staticDir: null });
  cleanups.push(() => api.close(), () => control.close());
  return { api, control, hosted };
}

describe('hosting a model from its URL through the control API', () => {
  it('shows the download, cancels and resumes it, then hosts the cached file with its URL', async () => {
    const data = body(6 * 1024 * 1024);
    const server = await startRangeServer({ body: data });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const { api, control, hosted } = await downloadingControl(cacheDir, slowFetch);
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

  it('checks the download against the request\'s model_sha256: a mismatch hosts nothing, a match hosts the file', async () => {
    const server = await startRangeServer({ body: stories });
    cleanups.push(() => server.close());
    const cacheDir = await scratch();
    const { api, hosted } = await downloadingControl(cacheDir);
    const url = `${server.url}/stories.gguf`;
    const bad = await call(api, 'POST', '/session/host', { model_url: url, model_sha256: 'abc' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/model_sha256.*64 hex digits/);
    // A checksum checks a download: not a local file.
    expect((await call(api, 'POST', '/session/host', { model: 'm.gguf', model_url: url, model_sha256: sha256(stories) })).status).toBe(400);

    expect((await call(api, 'POST', '/session/host', { model_url: url, model_sha256: '0'.repeat(64) })).status).toBe(200);
    const failed = await until('the checksum to fail', api, (s) => s.download?.state === 'failed');
    expect(failed.role).toBe('none');
    expect(failed.download?.error).toMatchObject({ code: 'CHECKSUM_MISMATCH', message: expect.stringMatching(/expected 0{64}/) });
    await expect(stat(modelCachePath(url, cacheDir))).rejects.toThrow();
    expect(hosted).toEqual([]);

    expect((await call(api, 'POST', '/session/host', { model_url: url, model_sha256: sha256(stories).toUpperCase(), auto_approve: true })).status).toBe(200);
    const hosting = await until('hosting the checked download', api, (s) => s.role === 'host');
    expect(hosting.model).toBe(modelCachePath(url, cacheDir));
    // The checksum was the download's; the session gets the checked file and its URL.
    expect(hosted).toEqual([{ model: modelCachePath(url, cacheDir), model_url: url, auto_approve: true }]);
    const entry = JSON.parse(await readFile(`${modelCachePath(url, cacheDir)}.entry.json`, 'utf8')) as { sha256?: string };
    expect(entry.sha256).toBe(sha256(stories));
  });

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
