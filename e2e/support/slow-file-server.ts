// A loopback HTTP server publishing one model file at a limited rate, so a browser test sees a
// download in progress (bytes, speed) and can cancel it. Range requests (`bytes=a-`, `bytes=a-b`)
// as a model host answers them: a resumed download and members fetching their tensors use them.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SlowFileServer {
  /** The file's URL, ending in its name. */
  url: string;
  requests: Array<{ range: string | undefined }>;
  close(): Promise<void>;
}

const CHUNK = 16 * 1024;

export async function startSlowFileServer(body: Buffer, name: string, bytesPerSecond: number): Promise<SlowFileServer> {
  const requests: SlowFileServer['requests'] = [];
  const server = createServer((req, res) => {
    if (req.url !== `/${name}`) {
      res.writeHead(404).end();
      return;
    }
    const range = req.headers.range;
    requests.push({ range });
    let start = 0;
    let end = body.length - 1;
    const m = range !== undefined ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
    if (m !== null) {
      start = Number(m[1]);
      if (m[2] !== undefined && m[2] !== '') end = Math.min(end, Number(m[2]));
      if (start >= body.length || end < start) {
        res.writeHead(416, { 'content-range': `bytes */${body.length}` }).end();
        return;
      }
    }
    res.writeHead(m !== null ? 206 : 200, {
      'content-length': String(end - start + 1),
      'accept-ranges': 'bytes',
      ...(m !== null ? { 'content-range': `bytes ${start}-${end}/${body.length}` } : {}),
    });
    let at = start;
    const next = (): void => {
      if (res.destroyed) return;
      if (at > end) {
        res.end();
        return;
      }
      const n = Math.min(CHUNK, end + 1 - at);
      res.write(body.subarray(at, at + n));
      at += n;
      setTimeout(next, (n / bytesPerSecond) * 1000);
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/${name}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
