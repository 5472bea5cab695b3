// The control API the UI talks to (HTTP + SSE on loopback, ARCHITECTURE.md): every /api route
// needs `Authorization: Bearer <token>` (compared in constant time), every body is validated with
// the zod schemas of common/control-api.ts, and failures become `{error:{code,message}}` with the
// status from one table. The same origin serves the built renderer (renderer/dist), so a headless
// `kiwi host` offers the UI at its own address. The core knows only a ControlSource. Before routing,
// every request passes http-guard.ts (Host, Content-Type, CORS); sockets are bounded like the API's.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import type { z } from 'zod';
import {
  BenchRequest, ChatRequest, CONTROL_API_PREFIX, DecideRequest, HostRequest, JoinRequest, MAX_CONTROL_BODY_BYTES, PauseRequest,
  type ControlEvent, type ErrorBody,
} from '../../../common/control-api.js';
import { isKiwiError, KiwiError, type KiwiErrorCode } from '../errors.js';
import { parseJson } from '../parse-json.js';
import type { ControlSource } from './control-source.js';
import { matchesSecret, secretDigest } from './bearer-secret.js';
import { createHttpGuard, flatHeaders } from './http-guard.js';
import { DEFAULT_SOCKET_LIMITS, socketServerOptions, type SocketLimits } from './socket-limits.js';

export interface ControlApiOptions {
  source: ControlSource;
  /** The bearer token; a random one when not given. */
  token?: string;
  /** Folder of the built renderer; default: renderer/dist of this checkout or package. */
  staticDir?: string | null;
  /** Default 127.0.0.1 (the control API stays on loopback). */
  host?: string;
  /** Default 0: any free port. */
  port?: number;
  /** SSE keep-alive comment interval. */
  keepAliveMs?: number;
  /** More Host names to accept besides localhost, 127.0.0.1 and [::1]; '*' any. */
  allowedHosts?: readonly string[];
  /** Browser origins allowed besides local ones and the UI's own; '*' any. */
  corsOrigins?: readonly string[];
  /** Socket bounds; default DEFAULT_SOCKET_LIMITS, with at most 64 connections. */
  limits?: Partial<SocketLimits>;
}

export interface ControlApi {
  /** e.g. http://127.0.0.1:49152/api */
  readonly url: string;
  /** The UI with its token in the fragment (never sent to the server, never logged). */
  readonly uiUrl: string;
  readonly token: string;
  readonly port: number;
  close(): Promise<void>;
}

/** HTTP status of each control API error code; anything else is a 400 (the user's input was refused). */
const STATUS: Partial<Record<KiwiErrorCode, number>> = {
  CONTROL_UNAUTHORIZED: 401,
  CONTROL_NOT_FOUND: 404,
  CONTROL_BUSY: 409,
  CONTROL_NOT_SERVING: 503,
  API_BODY_TOO_LARGE: 413,
  API_METHOD_NOT_ALLOWED: 405,
};

const MIME: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon', '.json': 'application/json; charset=utf-8', '.woff2': 'font/woff2',
};

/** renderer/dist next to this checkout (tsx: electron/engine/server) or the build (dist/electron/engine/server). */
export function defaultRendererDir(): string | null {
  for (const up of ['../../../renderer/dist', '../../../../renderer/dist']) {
    const dir = resolve(import.meta.dirname, up);
    if (existsSync(join(dir, 'index.html'))) return dir;
  }
  return null;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** The request handler alone (tests drive it in-process); startControlApi puts it on a socket. */
export function createControlApi(opts: {
  source: ControlSource;
  token: string;
  staticDir: string | null;
  keepAliveMs?: number;
  /** The listen address (the Host check depends on it). Default 127.0.0.1. */
  host?: string;
  allowedHosts?: readonly string[];
  corsOrigins?: readonly string[];
}): Handler {
  const tokenDigest = secretDigest(opts.token);
  const { source } = opts;
  const guard = createHttpGuard({ listenHost: opts.host ?? '127.0.0.1', allowedHosts: opts.allowedHosts ?? [], corsOrigins: opts.corsOrigins ?? [], methods: ['GET', 'POST', 'HEAD'] });

  const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => Promise<void>> = {
    'GET /status': async (_req, res) => json(res, 200, source.status()),
    'GET /device': async (_req, res) => json(res, 200, source.device()),
    'POST /device/bench': async (req, res) => {
      const body = await readJson(req, BenchRequest);
      source.bench(body.refresh ?? false);
      json(res, 202, source.device());
    },
    'POST /session/host': async (req, res) => {
      await source.host(await readJson(req, HostRequest));
      json(res, 200, source.status());
    },
    'POST /session/download/cancel': async (_req, res) => {
      source.cancelDownload();
      json(res, 200, source.status());
    },
    'POST /session/join': async (req, res) => {
      await source.join(await readJson(req, JoinRequest));
      json(res, 200, source.status());
    },
    'POST /session/leave': async (_req, res) => {
      await source.leave();
      json(res, 200, source.status());
    },
    'POST /session/pause': async (req, res) => {
      await source.pause((await readJson(req, PauseRequest)).paused);
      json(res, 200, source.status());
    },
    'POST /session/decide': async (req, res) => {
      const body = await readJson(req, DecideRequest);
      source.decide(body.member_id, body.approve);
      json(res, 200, source.status());
    },
    'GET /events': async (req, res) => events(req, res, source, opts.keepAliveMs ?? 15_000),
    'POST /chat': async (req, res) => chat(req, res, source),
  };

  return async (req, res) => {
    const decision = guard({ method: req.method ?? 'GET', headers: flatHeaders(req.headers) });
    for (const [k, v] of Object.entries(decision.headers)) res.setHeader(k, v);
    if (decision.kind === 'answer') {
      res.writeHead(decision.status).end();
      return;
    }
    if (decision.kind === 'refuse') {
      if (!req.complete) res.setHeader('connection', 'close');
      json(res, decision.status, { error: { code: decision.code, message: decision.message } } satisfies ErrorBody);
      return;
    }
    try {
      const path = new URL(req.url ?? '/', 'http://localhost').pathname;
      if (path !== CONTROL_API_PREFIX && !path.startsWith(`${CONTROL_API_PREFIX}/`)) {
        await serveStatic(req, res, opts.staticDir, path);
        return;
      }
      if (!authorized(req, tokenDigest)) throw new KiwiError('CONTROL_UNAUTHORIZED', 'The control API needs the token Kiwi printed with its address (Authorization: Bearer TOKEN).');
      const sub = path.slice(CONTROL_API_PREFIX.length);
      const route = routes[`${req.method ?? 'GET'} ${sub}`];
      if (route === undefined) {
        const exists = Object.keys(routes).some((k) => k.endsWith(` ${sub}`));
        throw exists ? new KiwiError('API_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}.`) : new KiwiError('CONTROL_NOT_FOUND', `No control API route ${path}.`);
      }
      await route(req, res);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      if (res.headersSent) {
        res.destroy();
        return;
      }
      // A refused body was left unread: do not keep the connection for another request.
      if (!req.complete) res.setHeader('connection', 'close');
      const body: ErrorBody = { error: { code: err.code, message: err.message } };
      json(res, STATUS[err.code] ?? 400, body);
    }
  };
}

export async function startControlApi(opts: ControlApiOptions): Promise<ControlApi> {
  const token = opts.token ?? randomBytes(24).toString('base64url');
  const staticDir = opts.staticDir === undefined ? defaultRendererDir() : opts.staticDir;
  const host = opts.host ?? '127.0.0.1';
  const handle = createControlApi({
    source: opts.source, token, staticDir, host, allowedHosts: opts.allowedHosts ?? [], corsOrigins: opts.corsOrigins ?? [],
    ...(opts.keepAliveMs !== undefined ? { keepAliveMs: opts.keepAliveMs } : {}),
  });
  const limits: SocketLimits = { ...DEFAULT_SOCKET_LIMITS, maxConnections: 64, ...opts.limits };
  const server = createServer(socketServerOptions(limits), (req, res) => {
    handle(req, res).catch((err: unknown) => {
      // Anything but a KiwiError escaping a route is a bug: answer 500 and say so loudly.
      process.stderr.write(`kiwi control API: ${(err as Error)?.stack ?? String(err)}\n`);
      if (!res.headersSent) json(res, 500, { error: { code: 'INTERNAL', message: 'Kiwi hit a bug handling this request; see its log.' } });
      else res.destroy();
    });
  });
  server.maxConnections = limits.maxConnections;
  await new Promise<void>((ok, fail) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      fail(new KiwiError('LISTEN_FAILED', `cannot listen on ${host}:${opts.port ?? 0} for the UI (${err.code ?? err.message}); choose another port`)));
    server.listen(opts.port ?? 0, host, () => ok());
  });
  const port = (server.address() as AddressInfo).port;
  const origin = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return {
    url: `${origin}${CONTROL_API_PREFIX}`,
    uiUrl: `${origin}/#token=${encodeURIComponent(token)}`,
    token,
    port,
    close: () =>
      new Promise<void>((ok) => {
        server.close(() => ok());
        // SSE streams never end by themselves.
        server.closeAllConnections();
      }),
  };
}

/** Constant-time (bearer-secret.ts). */
function authorized(req: IncomingMessage, tokenDigest: Buffer): boolean {
  const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
  return m !== null && matchesSecret(m[1] as string, tokenDigest);
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', 'content-length': String(Buffer.byteLength(body)) }).end(body);
}

async function readJson<T extends z.ZodType>(req: IncomingMessage, schema: T): Promise<z.infer<T>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_CONTROL_BODY_BYTES) throw new KiwiError('API_BODY_TOO_LARGE', `Request body of ${declared} bytes; the control API takes at most ${MAX_CONTROL_BODY_BYTES}.`);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_CONTROL_BODY_BYTES) throw new KiwiError('API_BODY_TOO_LARGE', `Request body over ${MAX_CONTROL_BODY_BYTES} bytes.`);
      chunks.push(chunk);
    }
  } catch (err) {
    if (isKiwiError(err)) throw err;
    // The socket closed mid-body (the client left, or the request timeout cut it off): not a bug.
    throw new KiwiError('CONTROL_BAD_REQUEST', `The request body was cut off (${(err as Error).message}).`);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  return parseJson(schema, text === '' ? '{}' : text, {
    code: 'CONTROL_BAD_REQUEST',
    notJson: () => 'The request body is not JSON.',
    invalid: ([first]) => `Invalid request: ${first}.`,
    root: 'body',
  });
}

/** text/event-stream: the current status and device card at once, then every change. */
async function events(req: IncomingMessage, res: ServerResponse, source: ControlSource, keepAliveMs: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive' });
  const send = (e: ControlEvent): void => {
    if (!res.destroyed) res.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
  };
  send({ type: 'status', status: source.status() });
  send({ type: 'device', device: source.device() });
  const unsubscribe = source.subscribe(send);
  const keepAlive = setInterval(() => {
    if (!res.destroyed) res.write(': keep-alive\n\n');
  }, keepAliveMs);
  await new Promise<void>((done) => req.socket.once('close', () => done()));
  clearInterval(keepAlive);
  unsubscribe();
}

/** The chat playground: relays a streamed chat completion from this machine's /v1. */
async function chat(req: IncomingMessage, res: ServerResponse, source: ControlSource): Promise<void> {
  const body = await readJson(req, ChatRequest);
  const serving = source.status().serving;
  if (serving === null) throw new KiwiError('CONTROL_NOT_SERVING', 'This Kiwi serves no model right now: host a session first.');
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  let upstream: Response;
  try {
    upstream = await fetch(`${serving.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: serving.model, stream: true, ...body }),
      signal: abort.signal,
    });
  } catch (err) {
    throw new KiwiError('CONTROL_NOT_SERVING', `The model API at ${serving.url} did not answer (${(err as Error).message}).`);
  }
  res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'text/event-stream', 'cache-control': 'no-store' });
  res.flushHeaders();
  if (upstream.body === null) {
    res.end();
    return;
  }
  const stream = Readable.fromWeb(upstream.body as Parameters<typeof Readable.fromWeb>[0]);
  try {
    for await (const chunk of stream) {
      if (res.destroyed) break;
      res.write(chunk);
    }
  } catch (err) {
    // The client left (abort) or the model API dropped the stream: end ours too.
    if (!abort.signal.aborted) res.destroy(err as Error);
    return;
  }
  res.end();
}

async function serveStatic(req: IncomingMessage, res: ServerResponse, dir: string | null, path: string): Promise<void> {
  if (req.method !== 'GET' && req.method !== 'HEAD') throw new KiwiError('API_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}.`);
  if (dir === null) throw new KiwiError('CONTROL_NOT_FOUND', 'The UI is not built: run `npm run build:renderer`.');
  let rel: string;
  try {
    rel = normalize(decodeURIComponent(path === '/' ? '/index.html' : path));
  } catch {
    throw new KiwiError('CONTROL_NOT_FOUND', `No file ${path}.`);
  }
  const file = join(dir, rel);
  // normalize() has resolved any `..`; what is left must still be inside the folder.
  if (!file.startsWith(dir + sep)) throw new KiwiError('CONTROL_NOT_FOUND', `No file ${path}.`);
  const st = await stat(file).catch(() => null);
  if (st === null || !st.isFile()) throw new KiwiError('CONTROL_NOT_FOUND', `No file ${path}.`);
  const data = await readFile(file);
  res.writeHead(200, {
    'content-type': MIME[extname(file)] ?? 'application/octet-stream',
    'content-length': String(data.length),
    'x-content-type-options': 'nosniff',
    'cache-control': rel.startsWith(`${sep}assets${sep}`) ? 'public, max-age=31536000, immutable' : 'no-cache',
  });
  res.end(req.method === 'HEAD' ? undefined : data);
}
