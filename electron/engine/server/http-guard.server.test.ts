// The browser policy and socket bounds on real sockets: the OpenAI API (stories260K) and the control
// API refuse rebinding Hosts, non-JSON bodies and foreign origins before routing, answer preflights,
// put CORS headers on streams, cut off slow and silent clients, and cap their connections.
import { connect, type Socket } from 'node:net';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { startControlApi, type ControlApi } from './control-api.js';
import { SessionControl } from '../hosting/session-control.js';
import { startOpenAiServer, type OpenAiServer } from './http-server.js';
import { LocalBackend } from './local-backend.js';

let backend: LocalBackend;
let api: OpenAiServer;
let control: ControlApi;
const closers: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  backend = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1 });
  api = await startOpenAiServer(backend, { port: 0, allowedHosts: ['kiwi.lan'], corsOrigins: ['https://chat.example'], requestTimeoutMs: 400, headersTimeoutMs: 300, maxConnections: 4 });
  const source = new SessionControl();
  control = await startControlApi({ source, staticDir: null, limits: { requestTimeoutMs: 400, headersTimeoutMs: 300 } });
  closers.push(() => api.close(), () => control.close(), () => source.close(), () => backend.close());
});
afterAll(async () => {
  for (const c of closers) await c();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** node:http, which (unlike fetch) lets a test send any Host and Origin. */
function send(port: number, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, headers: { ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const chatBody = JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });

function completed(): number {
  return backend.stats().completed;
}

describe('the OpenAI API behind the guard', () => {
  it('refuses a DNS-rebinding Host before routing, and accepts the loopback names and configured ones', async () => {
    const before = completed();
    const evil = await send(api.port, 'POST', '/v1/chat/completions', { host: `evil.example:${api.port}`, 'content-type': 'application/json' }, chatBody);
    expect(evil.status).toBe(403);
    expect(JSON.parse(evil.body)).toMatchObject({ error: { code: 'host_not_allowed', type: 'invalid_request_error' } });
    for (const host of [`localhost:${api.port}`, `[::1]:${api.port}`, `kiwi.lan:${api.port}`]) {
      expect((await send(api.port, 'GET', '/health', { host })).status).toBe(200);
    }
    expect(completed()).toBe(before);
  });

  it('refuses a body that is not JSON with 415 naming the header, and does not generate', async () => {
    const before = completed();
    // What `curl -d '{...}' URL` sends.
    const curl = await send(api.port, 'POST', '/v1/chat/completions', { 'content-type': 'application/x-www-form-urlencoded' }, chatBody);
    expect(curl.status).toBe(415);
    const err = JSON.parse(curl.body) as { error: { code: string; message: string; param: string } };
    expect(err.error).toMatchObject({ code: 'unsupported_media_type', param: 'content-type' });
    expect(err.error.message).toContain("-H 'Content-Type: application/json'");
    expect((await send(api.port, 'POST', '/v1/completions', { 'content-type': 'text/plain' }, JSON.stringify({ prompt: 'Once', max_tokens: 2 }))).status).toBe(415);
    expect(completed()).toBe(before);
    const ok = await send(api.port, 'POST', '/v1/chat/completions', { 'content-type': 'application/json' }, chatBody);
    expect(ok.status).toBe(200);
    expect(completed()).toBe(before + 1);
  });

  it('answers a preflight from a local origin (it was 405) and refuses one from elsewhere', async () => {
    const ask = (origin: string) => send(api.port, 'OPTIONS', '/v1/chat/completions', { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' });
    const local = await ask('http://localhost:5173');
    expect(local.status).toBe(204);
    expect(local.headers).toMatchObject({
      'access-control-allow-origin': 'http://localhost:5173', 'access-control-allow-methods': 'GET, POST', 'access-control-allow-headers': 'authorization, content-type', vary: 'Origin',
    });
    expect((await ask('https://chat.example')).status).toBe(204);
    const foreign = await ask('http://127.0.0.2:3000');
    expect(foreign.status).toBe(403);
    expect(foreign.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('puts the CORS headers on a streamed answer', async () => {
    const res = await send(api.port, 'POST', '/v1/chat/completions', { origin: 'http://127.0.0.1:3000', 'content-type': 'application/json' }, JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/event-stream/);
    expect(res.headers['access-control-allow-origin']).toBe('http://127.0.0.1:3000');
    expect(res.body).toContain('data: [DONE]');
  });

  it('refuses a prompt too long for the context before tokenizing it (400 context_length_exceeded)', async () => {
    const before = completed();
    const res = await send(api.port, 'POST', '/v1/completions', { 'content-type': 'application/json' }, JSON.stringify({ prompt: 'Once upon a time '.repeat(128 * 1024), max_tokens: 2 }));
    expect(res.status).toBe(400);
    const err = JSON.parse(res.body) as { error: { code: string; message: string } };
    expect(err.error.code).toBe('context_length_exceeded');
    expect(err.error.message).toMatch(/the prompt has 2228224 bytes/);
    expect(completed()).toBe(before);
  });

  it('refuses a real request from a foreign origin', async () => {
    const res = await send(api.port, 'POST', '/v1/chat/completions', { origin: 'https://evil.example', 'content-type': 'application/json' }, chatBody);
    expect(res.status).toBe(403);
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'origin_not_allowed' } });
  });
});

describe('the control API behind the guard', () => {
  it('refuses a rebinding Host even with the token, and a foreign origin', async () => {
    const auth = { authorization: `Bearer ${control.token}` };
    expect((await send(control.port, 'GET', '/api/status', { ...auth, host: `evil.example:${control.port}` })).status).toBe(403);
    expect((await send(control.port, 'GET', '/', { host: `evil.example:${control.port}` })).status).toBe(403);
    expect((await send(control.port, 'GET', '/api/status', { ...auth, origin: 'https://evil.example' })).status).toBe(403);
    const ok = await send(control.port, 'GET', '/api/status', { ...auth, origin: `http://127.0.0.1:${control.port}` });
    expect(ok.status).toBe(200);
  });

  it('refuses a form-encoded body with 415 and answers preflights', async () => {
    const res = await send(control.port, 'POST', '/api/session/pause', { authorization: `Bearer ${control.token}`, 'content-type': 'text/plain' }, '{"paused":true}');
    expect(res.status).toBe(415);
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'HTTP_UNSUPPORTED_MEDIA_TYPE' } });
    const pre = await send(control.port, 'OPTIONS', '/api/status', { origin: 'http://localhost:5173', 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' });
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('http://localhost:5173');
  });
});

/** Resolves with what the server wrote before it closed the socket. */
function untilClosed(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (text += c));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(text));
  });
}

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  });
}

describe('socket bounds', () => {
  it.each([
    ['the API', () => api.port, '/v1/chat/completions', () => ''],
    ['the control API', () => control.port, '/api/session/pause', () => `authorization: Bearer ${control.token}\r\n`],
  ])('%s answers 408 to a body that never finishes and closes the socket', async (_what, port, path, auth) => {
    const s = await open(port());
    const closed = untilClosed(s);
    s.write(`POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n${auth()}content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"mess`);
    expect(await closed).toMatch(/^HTTP\/1\.1 408/);
  });

  it.each([['the API', () => api.port], ['the control API', () => control.port]])('%s closes a connection that never sends its headers', async (_what, port) => {
    const s = await open(port());
    const closed = untilClosed(s);
    s.write('GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n');
    expect(await closed).toMatch(/^HTTP\/1\.1 408/);
  });

  it('closes connections beyond the cap at once and serves again when they go', async () => {
    const held = await Promise.all([0, 1, 2, 3].map(() => open(api.port)));
    const extra = await open(api.port);
    expect(await untilClosed(extra)).toBe('');
    for (const s of held) s.destroy();
    await Promise.all(held.map((s) => (s.closed ? Promise.resolve() : new Promise((r) => s.once('close', r)))));
    // The server counts a socket as gone when its own side closes: retry until a slot is free.
    let status = 0;
    while (status !== 200) status = (await send(api.port, 'GET', '/health', {}).catch(() => ({ status: 0 }))).status;
    expect(status).toBe(200);
  });
});
