// The host's GGUF served as byte ranges over plain HTTP on its direct-link interface, so a member
// on the same network loads its tensors at the link's speed instead of through the encrypted
// session. Only `GET /model.gguf` with one `Range: bytes=a-b` and a member's own bearer token is
// answered, and only for bytes inside the spans granted to that member: its assignment's
// (grant(), sent to it only inside its encrypted weights-plan), plus whatever the host adds later
// (allow(): the hook for standby layers). A member that leaves or is planned out is revoked: its
// token is refused from then on and its responses in flight are cut; a new assignment narrows the
// grant the same way. The bytes travel in clear, but integrity holds: each span's sha256 reaches
// the member over the encrypted channel and span-fetch.ts checks it. `kiwi host --weights-http
// off` keeps weights on the encrypted stream for those who do not want them readable on their LAN.
//
// The server (weights-http-serve.ts) runs on a worker thread (weights-http-worker.ts), so the
// host's own stage builds and ring steps do not stall a transfer; a grant resolves once the worker
// holds it, before the member can present the token. Where no worker can start (a packaging
// without the worker file) it runs on this thread.
import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import type { Worker } from 'node:worker_threads';
import { startModuleWorker } from '../module-worker.js';
import { KiwiError } from '../errors.js';
import { reachableHosts } from '../transport/addresses.js';
import type { Span } from './member-weights.js';
import { applyToTable, GrantTable, rangeServer, tokenKey, WEIGHTS_HTTP_PATH, type FromWorker, type ToWorker } from './weights-http-serve.js';

export { WEIGHTS_HTTP_PATH } from './weights-http-serve.js';

/** Who may read which bytes: what the ring's host gives each member (session-host.ts). */
export interface WeightsTokens {
  /**
   * The token of `memberId`, allowing exactly `spans` (its assignment) once it resolves: the
   * member's earlier grant, if any, is replaced (its token stays), and its responses outside it are cut.
   */
  grant(memberId: string, spans: readonly Span[]): Promise<string>;
  /** Adds `spans` to the member's grant (later standby layers); a member without a grant gets none. */
  allow(memberId: string, spans: readonly Span[]): Promise<void>;
  /** The member's token is refused from now on and its responses in flight end. */
  revoke(memberId: string): Promise<void>;
  /** Revokes every member but `memberIds` (those planned out of a new ring). */
  retain(memberIds: readonly string[]): Promise<void>;
  /** Members holding a token now (a test's and a status's view). */
  granted(): string[];
}

export interface WeightsHttpServer extends WeightsTokens {
  /** URLs members can try, in order (one per reachable address of the bind host). */
  readonly urls: string[];
  readonly port: number;
  /** Whether the server runs on its own worker thread (false: the fallback on this thread). */
  readonly offThread: boolean;
  close(): Promise<void>;
}

type Message = ToWorker extends infer M ? (M extends { seq: number } ? Omit<M, 'seq'> : never) : never;

/** Where the table and the server live: a worker thread, or this thread. */
interface ServerHost {
  port: number;
  offThread: boolean;
  send(msg: Message): Promise<void>;
}

/** Serves `modelPath` on `host` (port 0: any free one); no member may read anything until granted. */
export async function startWeightsHttp(modelPath: string, opts: { host: string; port?: number; inThread?: boolean }): Promise<WeightsHttpServer> {
  const fileBytes = (await stat(modelPath)).size;
  const where = { modelPath, fileBytes, host: opts.host, port: opts.port ?? 0 };
  const served = (opts.inThread === true ? undefined : await onWorker(where)) ?? (await inThread(where));
  const tokens = new Map<string, { token: string; key: string }>();
  const checkSpans = (spans: readonly Span[]): Span[] => spans.map((s) => {
    if (!Number.isSafeInteger(s.offset) || !Number.isSafeInteger(s.bytes) || s.offset < 0 || s.bytes < 0 || s.offset + s.bytes > fileBytes) {
      throw new RangeError(`A grant of bytes ${s.offset}+${s.bytes} is not within the model's ${fileBytes} bytes.`);
    }
    return { offset: s.offset, bytes: s.bytes };
  });
  const revoke = async (memberId: string): Promise<void> => {
    const t = tokens.get(memberId);
    if (t === undefined) return;
    tokens.delete(memberId);
    await served.send({ type: 'revoke', key: t.key });
  };
  const urls = reachableHosts(opts.host).map((h) => `http://${h.includes(':') ? `[${h}]` : h}:${served.port}${WEIGHTS_HTTP_PATH}`).slice(0, 8);
  return {
    urls, port: served.port, offThread: served.offThread,
    async grant(memberId, spans) {
      const checked = checkSpans(spans);
      let t = tokens.get(memberId);
      if (t === undefined) {
        const token = randomBytes(32).toString('base64url');
        t = { token, key: tokenKey(token) };
        tokens.set(memberId, t);
      }
      await served.send({ type: 'set', key: t.key, spans: checked });
      return t.token;
    },
    async allow(memberId, spans) {
      const t = tokens.get(memberId);
      if (t !== undefined) await served.send({ type: 'add', key: t.key, spans: checkSpans(spans) });
    },
    revoke,
    async retain(memberIds) {
      for (const id of [...tokens.keys()]) if (!memberIds.includes(id)) await revoke(id);
    },
    granted: () => [...tokens.keys()],
    close: () => served.send({ type: 'close' }),
  };
}

type Where = { modelPath: string; fileBytes: number; host: string; port: number };

const listenFailed = (host: string, why: string): KiwiError => new KiwiError('LISTEN_FAILED', `Cannot serve the model's bytes on ${host}: ${why}.`);

async function inThread(where: Where): Promise<ServerHost> {
  const table = new GrantTable();
  const server = rangeServer(where.modelPath, where.fileBytes, table);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenFailed(where.host, err.message)));
    server.listen(where.port, where.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    offThread: false,
    send: (msg) => {
      if (msg.type !== 'close') {
        applyToTable(table, { ...msg, seq: 0 });
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

/** The server on a worker thread; undefined when the worker cannot start (the caller serves in-thread). */
async function onWorker(where: Where): Promise<ServerHost | undefined> {
  let worker: Worker;
  try {
    worker = startModuleWorker(import.meta.url, 'weights-http-worker', { workerData: where });
  } catch {
    return undefined;
  }
  const pending = new Map<number, () => void>();
  let seq = 0;
  let gone = false;
  const started = new Promise<number | undefined>((resolve, reject) => {
    worker.on('message', (msg: FromWorker) => {
      if (msg.type === 'listening') resolve(msg.port);
      else if (msg.type === 'failed') reject(listenFailed(where.host, msg.message));
      else {
        pending.get(msg.seq)?.();
        pending.delete(msg.seq);
      }
    });
    const end = (): void => {
      gone = true;
      // A worker that never started: serve on this thread instead. One that died later: nothing waits on it.
      resolve(undefined);
      for (const done of pending.values()) done();
      pending.clear();
    };
    worker.on('error', end);
    worker.on('exit', end);
  });
  let port: number | undefined;
  try {
    port = await started;
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  if (port === undefined) return undefined;
  const post = (msg: Message): Promise<void> => {
    if (gone) return Promise.resolve();
    const n = ++seq;
    return new Promise<void>((resolve) => {
      pending.set(n, resolve);
      worker.postMessage({ ...msg, seq: n });
    });
  };
  return {
    port,
    offThread: true,
    send: async (msg) => {
      await post(msg);
      if (msg.type === 'close') await worker.terminate();
    },
  };
}
