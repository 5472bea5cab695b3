// The host's GGUF served as byte ranges over plain HTTP on its direct-link interface, so a member
// on the same network loads its tensors at the link's speed instead of through the encrypted
// session. Only `GET /model.gguf` with one `Range: bytes=a-b` inside the file and the session's
// bearer token (random, given to members only inside their encrypted weights-plan) is answered;
// everything else is refused with a clear status, and at most MAX_ACTIVE requests run at once.
// The bytes travel in clear, but integrity holds: each span's sha256 reaches the member over the
// encrypted channel and fetchSpans checks it. `kiwi host --weights-http off` keeps weights on the
// encrypted stream for those who do not want them readable on their LAN.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KiwiError } from '../errors.js';
import { reachableHosts } from '../transport/addresses.js';

export const WEIGHTS_HTTP_PATH = '/model.gguf';
const MAX_ACTIVE = 8;

export interface WeightsHttpServer {
  /** URLs members can try, in order (one per reachable address of the bind host). */
  readonly urls: string[];
  /** The bearer token a request must carry. */
  readonly token: string;
  readonly port: number;
  close(): Promise<void>;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Whether the Authorization header carries `token`; compared in constant time (over digests, so lengths never leak). */
function tokenMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer (\S+)$/.exec(header ?? '');
  return m !== null && timingSafeEqual(digest(m[1]!), digest(token));
}

function refuse(res: ServerResponse, status: number, why: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', connection: 'close', ...headers });
  res.end(`${why}\n`);
}

/** Serves `modelPath` on `host` (port 0: any free one). */
export async function startWeightsHttp(modelPath: string, opts: { host: string; port?: number }): Promise<WeightsHttpServer> {
  const fileBytes = (await stat(modelPath)).size;
  const token = randomBytes(32).toString('base64url');
  let active = 0;
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    if (req.method !== 'GET') return refuse(res, 405, 'Only GET is served here.', { allow: 'GET' });
    if (req.url !== WEIGHTS_HTTP_PATH) return refuse(res, 404, `Only ${WEIGHTS_HTTP_PATH} is served here.`);
    if (req.headers.authorization === undefined) return refuse(res, 401, 'A bearer token is required.', { 'www-authenticate': 'Bearer' });
    if (!tokenMatches(req.headers.authorization, token)) return refuse(res, 403, 'Wrong token.');
    const m = /^bytes=(\d{1,15})-(\d{1,15})$/.exec(req.headers.range ?? '');
    if (m === null) return refuse(res, 400, 'One Range: bytes=a-b is required.');
    const start = Number(m[1]);
    const end = Number(m[2]);
    if (start > end || end >= fileBytes) return refuse(res, 416, `The range ${start}-${end} is not within the file's ${fileBytes} bytes.`, { 'content-range': `bytes */${fileBytes}` });
    if (active >= MAX_ACTIVE) return refuse(res, 503, 'Too many transfers at once; try again.', { 'retry-after': '1' });
    active++;
    let released = false;
    const release = (): void => {
      if (!released) active--;
      released = true;
    };
    res.on('close', release);
    res.writeHead(206, { 'content-type': 'application/octet-stream', 'content-length': String(end - start + 1), 'content-range': `bytes ${start}-${end}/${fileBytes}` });
    const stream = createReadStream(modelPath, { start, end, highWaterMark: 1 << 20 });
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  };
  const server: Server = createServer(handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new KiwiError('LISTEN_FAILED', `Cannot serve the model's bytes on ${opts.host}: ${err.message}.`)));
    server.listen(opts.port ?? 0, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const urls = reachableHosts(opts.host).map((h) => `http://${h.includes(':') ? `[${h}]` : h}:${port}${WEIGHTS_HTTP_PATH}`).slice(0, 8);
  return {
    urls, token, port,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
