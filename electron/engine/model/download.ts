// Downloads a file over HTTP(S) into a cache: resumes a partial download with a Range request,
// reports progress, verifies size and sha256, and only then moves it into place (so a file at
// `dest` is always complete and verified).
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { KiwiError } from '../errors.js';

export interface DownloadProgress {
  receivedBytes: number;
  /** Known from Content-Length / Content-Range or the caller's expectation; undefined when the server does not say. */
  totalBytes: number | undefined;
  resumed: boolean;
}

export interface DownloadOptions {
  url: string;
  dest: string;
  sha256?: string;
  expectedBytes?: number;
  onProgress?: (p: DownloadProgress) => void;
  signal?: AbortSignal;
  /** Injected for tests; defaults to the global fetch. */
  fetchImpl?: typeof fetch;
}

const MAX_REDIRECTS = 5;

export async function downloadFile(opts: DownloadOptions): Promise<string> {
  const { url, dest, signal } = opts;
  const fetchImpl = opts.fetchImpl ?? fetch;
  const part = `${dest}.part`;
  await mkdir(dirname(dest), { recursive: true });

  let offset = (await fileSize(part)) ?? 0;
  if (opts.expectedBytes !== undefined && offset > opts.expectedBytes) {
    await rm(part, { force: true });
    offset = 0;
  }

  const response = await fetchWithRedirects(fetchImpl, url, offset, signal);
  let resumed = false;
  if (response.status === 206 && offset > 0) {
    resumed = true;
  } else if (response.status === 416 && offset > 0) {
    // The partial file already holds every byte (or more); verify it below.
    await response.body?.cancel();
    resumed = true;
  } else if (response.status === 200) {
    offset = 0; // Server ignored the Range header: start over.
  } else {
    await response.body?.cancel();
    throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} failed: HTTP ${response.status} ${response.statusText}. Check the address and your connection, then try again.`, { url, status: response.status });
  }

  if (response.status !== 416) {
    const totalBytes = totalFromHeaders(response, offset) ?? opts.expectedBytes;
    if (opts.expectedBytes !== undefined && totalBytes !== undefined && totalBytes !== opts.expectedBytes) {
      await response.body?.cancel();
      throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} failed: the server offers ${totalBytes} bytes but ${opts.expectedBytes} were expected.`, { url });
    }
    await appendBody(response, part, offset, resumed, totalBytes, opts.onProgress, url);
  }

  const size = (await fileSize(part)) ?? 0;
  if (opts.expectedBytes !== undefined && size !== opts.expectedBytes) {
    throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} is incomplete (${size} of ${opts.expectedBytes} bytes); run the command again to resume.`, { url });
  }
  if (opts.sha256 !== undefined) {
    const actual = await sha256File(part);
    if (actual !== opts.sha256.toLowerCase()) {
      await rm(part, { force: true });
      throw new KiwiError('CHECKSUM_MISMATCH', `download of ${url} has sha256 ${actual}, expected ${opts.sha256}; the damaged file was removed, run the command again.`, { url });
    }
  }
  await rename(part, dest);
  return dest;
}

async function fetchWithRedirects(fetchImpl: typeof fetch, url: string, offset: number, signal: AbortSignal | undefined): Promise<Response> {
  let current = url;
  for (let i = 0; i <= MAX_REDIRECTS; i++) {
    const headers: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
    let response: Response;
    try {
      response = await fetchImpl(current, { headers, redirect: 'manual', ...(signal ? { signal } : {}) });
    } catch (err) {
      if (signal?.aborted) throw err;
      throw new KiwiError('DOWNLOAD_FAILED', `cannot reach ${current}: ${(err as Error).message}. Check your connection, then try again.`, { url: current });
    }
    const location = response.headers.get('location');
    if (response.status >= 300 && response.status < 400 && location !== null) {
      await response.body?.cancel();
      current = new URL(location, current).toString();
      continue;
    }
    return response;
  }
  throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} failed: more than ${MAX_REDIRECTS} redirects.`, { url });
}

function totalFromHeaders(response: Response, offset: number): number | undefined {
  const range = response.headers.get('content-range');
  const match = range !== null ? /\/(\d+)\s*$/.exec(range) : null;
  if (match?.[1] !== undefined) return Number(match[1]);
  const length = response.headers.get('content-length');
  return length !== null && /^\d+$/.test(length) ? offset + Number(length) : undefined;
}

async function appendBody(
  response: Response,
  part: string,
  offset: number,
  resumed: boolean,
  totalBytes: number | undefined,
  onProgress: DownloadOptions['onProgress'],
  url: string,
): Promise<void> {
  if (response.body === null) throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} failed: empty response.`, { url });
  const out = createWriteStream(part, { flags: offset > 0 ? 'a' : 'w' });
  let received = offset;
  const closed = new Promise<void>((resolve, reject) => {
    out.on('close', resolve);
    out.on('error', reject);
  });
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      received += chunk.byteLength;
      if (totalBytes !== undefined && received > totalBytes) {
        throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} failed: the server sent more than the announced ${totalBytes} bytes.`, { url });
      }
      if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', resolve));
      onProgress?.({ receivedBytes: received, totalBytes, resumed });
    }
  } catch (err) {
    if (err instanceof KiwiError) throw err;
    throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} was interrupted after ${received} bytes (${(err as Error).message}); run the command again to resume.`, { url });
  } finally {
    out.end();
    await closed;
  }
}

async function fileSize(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** A one-line progress text for stderr: `stories260K.gguf  45% 0.5/1.1 MB`. */
export function formatProgress(label: string, p: DownloadProgress): string {
  const mb = (n: number): string => (n / 1e6).toFixed(1);
  if (p.totalBytes === undefined || p.totalBytes === 0) return `${label} ${mb(p.receivedBytes)} MB`;
  const pct = Math.floor((p.receivedBytes / p.totalBytes) * 100);
  return `${label} ${String(pct).padStart(3)}% ${mb(p.receivedBytes)}/${mb(p.totalBytes)} MB`;
}
