// A local HTTP server for download tests: serves one byte buffer with optional Range support (`bytes=a-`, `bytes=a-b`),
// redirects, failures and a connection cut after N bytes. Loopback only.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RangeServerOptions {
  body: Buffer;
  supportRange?: boolean;
  /** Destroy the socket after sending this many body bytes (simulates a dropped connection). */
  cutAfterBytes?: number;
  status?: number;
}

export interface RangeServer {
  url: string;
  requests: Array<{ path: string; range: string | undefined }>;
  options: RangeServerOptions;
  close(): Promise<void>;
}

export async function startRangeServer(options: RangeServerOptions): Promise<RangeServer> {
  const requests: RangeServer['requests'] = [];
  const server: Server = createServer((req, res) => {
    const range = req.headers.range;
    requests.push({ path: req.url ?? '', range });
    if (req.url === '/redirect') {
      res.writeHead(302, { location: '/file' });
      res.end();
      return;
    }
    if (options.status !== undefined) {
      res.writeHead(options.status);
      res.end('nope');
      return;
    }
    const body = options.body;
    let start = 0;
    let end = body.length - 1;
    let status = 200;
    const headers: Record<string, string> = {};
    // `bytes=a-` and `bytes=a-b` (inclusive end, clamped to the body as HTTP says).
    const match = range !== undefined ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
    if (options.supportRange !== false && match?.[1] !== undefined) {
      start = Number(match[1]);
      if (match[2] !== undefined && match[2] !== '') end = Math.min(end, Number(match[2]));
      if (start >= body.length || end < start) {
        res.writeHead(416, { 'content-range': `bytes */${body.length}` });
        res.end();
        return;
      }
      status = 206;
      headers['content-range'] = `bytes ${start}-${end}/${body.length}`;
    }
    const slice = body.subarray(start, end + 1);
    headers['content-length'] = String(slice.length);
    res.writeHead(status, headers);
    if (options.cutAfterBytes !== undefined && options.cutAfterBytes < slice.length) {
      res.write(slice.subarray(0, options.cutAfterBytes), () => res.destroy());
      return;
    }
    res.end(slice);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    options,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
