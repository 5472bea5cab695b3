// node:http around the OpenAI API core (openai-api.ts): turns sockets into ApiRequests, writes
// responses with per-response backpressure, cancels a request when its client disconnects, and
// shuts down gracefully (stop accepting, let running requests finish for a grace period, then
// cancel them). Listens on loopback unless told otherwise. Every request passes the browser policy
// of http-guard.ts (Host, Content-Type, CORS) before routing, and sockets are bounded in time and
// number so that slow or idle clients cannot hold the server.
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KiwiError } from '../errors.js';
import type { CompletionBackend } from '../completion/completion-backend.js';
import { json, type ApiResponse } from './api-response.js';
import { createHttpGuard, flatHeaders, type GuardDecision } from './http-guard.js';
import { DEFAULT_SOCKET_LIMITS, socketServerOptions, type SocketLimits } from './socket-limits.js';
import { createOpenAiApi } from './openai-api.js';
import { toOpenAiError } from './openai-errors.js';
import type { OpenAiApi, OpenAiApiOptions } from './openai-api.js';

export interface OpenAiServerOptions extends Omit<OpenAiApiOptions, 'backend'> {
  /** Default 127.0.0.1 (loopback); '0.0.0.0' or '::' to listen on the LAN. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** How long close() lets running requests finish before cancelling them. Default 3000 ms. */
  shutdownGraceMs?: number;
  /** More Host names to accept besides localhost, 127.0.0.1 and [::1] (`--allowed-host`); '*' any. */
  allowedHosts?: readonly string[];
  /** Browser origins allowed besides local ones (`--cors-origin`); '*' any. */
  corsOrigins?: readonly string[];
  /** Time to receive a whole request, headers and body (node's requestTimeout). Default 30 s. */
  requestTimeoutMs?: number;
  /** Time to receive the headers of a request. Default 10 s. */
  headersTimeoutMs?: number;
  /** How long an idle keep-alive connection stays open between requests. Default 5 s. */
  keepAliveTimeoutMs?: number;
  /** Open connections at most; more are closed at once. Default 256. */
  maxConnections?: number;
}

export interface OpenAiServer {
  /** Base URL of the API, e.g. http://127.0.0.1:8080/v1. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly api: OpenAiApi;
  /** Requests being handled right now. */
  readonly inFlight: number;
  close(): Promise<void>;
}

export async function startOpenAiServer(backend: CompletionBackend, opts: OpenAiServerOptions = {}): Promise<OpenAiServer> {
  const api = createOpenAiApi({ ...opts, backend });
  const host = opts.host ?? '127.0.0.1';
  const graceMs = opts.shutdownGraceMs ?? 3000;
  const inFlight = new Map<AbortController, Promise<void>>();
  let closing = false;
  const guard = createHttpGuard({ listenHost: host, allowedHosts: opts.allowedHosts ?? [], corsOrigins: opts.corsOrigins ?? [], methods: ['GET', 'POST'] });
  const limits: SocketLimits = {
    requestTimeoutMs: opts.requestTimeoutMs ?? DEFAULT_SOCKET_LIMITS.requestTimeoutMs,
    headersTimeoutMs: opts.headersTimeoutMs ?? DEFAULT_SOCKET_LIMITS.headersTimeoutMs,
    keepAliveTimeoutMs: opts.keepAliveTimeoutMs ?? DEFAULT_SOCKET_LIMITS.keepAliveTimeoutMs,
    maxConnections: opts.maxConnections ?? DEFAULT_SOCKET_LIMITS.maxConnections,
  };

  const server = createServer({ noDelay: true, ...socketServerOptions(limits) }, (req, res) => {
    const controller = new AbortController();
    const done = serve(api, guard, req, res, controller, () => closing, opts.onError).finally(() => inFlight.delete(controller));
    inFlight.set(controller, done);
  });
  server.maxConnections = limits.maxConnections;

  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void => {
      reject(new KiwiError('LISTEN_FAILED', `cannot listen on ${host}:${opts.port ?? 8080} (${err.code ?? err.message}); choose another --port or stop what uses it`, { host, port: opts.port ?? 8080 }));
    };
    server.once('error', onError);
    server.listen(opts.port ?? 8080, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;

  let closed: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${port}/v1`,
    host,
    port,
    api,
    get inFlight() {
      return inFlight.size;
    },
    close() {
      closed ??= (async () => {
        closing = true;
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        let timer: NodeJS.Timeout | undefined;
        const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
        await Promise.race([Promise.all(inFlight.values()), grace]);
        clearTimeout(timer);
        for (const c of inFlight.keys()) c.abort(shutdownError());
        await Promise.all(inFlight.values());
        server.closeAllConnections();
        await stopped;
      })();
      return closed;
    },
  };
}

async function serve(
  api: OpenAiApi,
  guard: (req: { method: string; headers: Readonly<Record<string, string | undefined>> }) => GuardDecision,
  req: IncomingMessage,
  res: ServerResponse,
  controller: AbortController,
  closing: () => boolean,
  onError: ((err: unknown) => void) | undefined,
): Promise<void> {
  // 'close' before the response finished: the client went away; its generation stops.
  res.on('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  const headers = flatHeaders(req.headers);
  const method = req.method ?? 'GET';
  const decision = guard({ method, headers });
  const response: ApiResponse = decision.kind === 'answer'
    ? { status: decision.status, headers: {}, body: '' }
    : decision.kind === 'refuse'
      ? refused(decision)
      : closing()
        ? shuttingDown()
        : await api.handle({
            method,
            path: new URL(req.url ?? '/', 'http://localhost').pathname,
            headers,
            body: req,
            signal: controller.signal,
          });
  // CORS headers go on every answer, SSE streams included.
  Object.assign(response.headers, decision.headers);
  if (res.destroyed) {
    if ('stream' in response) await response.stream[Symbol.asyncIterator]().return?.();
    return;
  }
  // A body left unread (refused early) or a server going down: do not keep the connection.
  if (!req.complete || closing()) res.setHeader('connection', 'close');
  if ('body' in response) {
    const length = response.status === 204 ? {} : { 'content-length': String(Buffer.byteLength(response.body)) };
    res.writeHead(response.status, { ...response.headers, ...length }).end(response.body);
    return;
  }
  res.writeHead(response.status, response.headers);
  res.flushHeaders(); // the client learns at once that its stream started, before the first token
  try {
    for await (const chunk of response.stream) {
      if (res.destroyed) break;
      if (!res.write(chunk)) await writable(res);
    }
  } catch (err) {
    // The API turns failures into error events (sse-stream.ts); anything escaping it is a bug.
    onError?.(err);
    res.destroy();
    return;
  }
  res.end();
}

/** The guard's refusal as an OpenAI error body (`code` in OpenAI's snake_case). */
function refused(d: Extract<GuardDecision, { kind: 'refuse' }>): ApiResponse {
  return json(d.status, { error: { message: d.message, type: 'invalid_request_error', param: d.reason === 'unsupported_media_type' ? 'content-type' : null, code: d.reason } });
}

function shuttingDown(): ApiResponse {
  const { status, body } = toOpenAiError(shutdownError());
  return json(status, body);
}

function shutdownError(): KiwiError {
  return new KiwiError('API_SHUTTING_DOWN', 'the server is shutting down; retry against a running server');
}

/** Resolves when `res` can take more (drain) or never will (closed). */
function writable(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
