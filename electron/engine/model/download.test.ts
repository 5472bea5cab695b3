import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { startRangeServer, type RangeServer } from '../test-support/range-server.js';
import { downloadFile, formatProgress, type DownloadProgress } from './download.js';

const body = randomBytes(300_000);
const sha256 = createHash('sha256').update(body).digest('hex');

describe('downloadFile', () => {
  let dir: string;
  let server: RangeServer | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kiwi-download-'));
  });
  afterEach(async () => {
    await server?.close();
    server = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  it('downloads a file, reports progress and verifies its sha256', async () => {
    server = await startRangeServer({ body });
    const progress: DownloadProgress[] = [];
    const dest = join(dir, 'model.gguf');
    await downloadFile({ url: `${server.url}/file`, dest, sha256, expectedBytes: body.length, onProgress: (p) => progress.push(p) });
    expect((await readFile(dest)).equals(body)).toBe(true);
    expect(progress.at(-1)).toEqual({ receivedBytes: body.length, totalBytes: body.length, resumed: false });
    await expect(access(`${dest}.part`)).rejects.toThrow();
  });

  it('resumes a partial download with a Range request', async () => {
    server = await startRangeServer({ body });
    const dest = join(dir, 'model.gguf');
    await writeFile(`${dest}.part`, body.subarray(0, 100_000));
    const progress: DownloadProgress[] = [];
    await downloadFile({ url: `${server.url}/file`, dest, sha256, onProgress: (p) => progress.push(p) });
    expect(server.requests[0]?.range).toBe('bytes=100000-');
    expect(progress[0]?.resumed).toBe(true);
    expect((await readFile(dest)).equals(body)).toBe(true);
  });

  it('starts over when the server ignores the Range header', async () => {
    server = await startRangeServer({ body, supportRange: false });
    const dest = join(dir, 'model.gguf');
    await writeFile(`${dest}.part`, Buffer.alloc(50_000, 7));
    await downloadFile({ url: `${server.url}/file`, dest, sha256 });
    expect((await readFile(dest)).equals(body)).toBe(true);
  });

  it('keeps the partial file after a dropped connection and completes on the next try', async () => {
    server = await startRangeServer({ body, cutAfterBytes: 120_000 });
    const dest = join(dir, 'model.gguf');
    const first = downloadFile({ url: `${server.url}/file`, dest, sha256, expectedBytes: body.length });
    await expect(first).rejects.toSatisfy((e) => isKiwiError(e, 'DOWNLOAD_FAILED'));
    const partial = await readFile(`${dest}.part`);
    expect(partial.length).toBeGreaterThan(0);
    expect(partial.equals(body.subarray(0, partial.length))).toBe(true);

    server.options.cutAfterBytes = undefined;
    await downloadFile({ url: `${server.url}/file`, dest, sha256, expectedBytes: body.length });
    expect(server.requests.at(-1)?.range).toBe(`bytes=${partial.length}-`);
    expect((await readFile(dest)).equals(body)).toBe(true);
  });

  it('verifies an already complete partial file when the server answers 416', async () => {
    server = await startRangeServer({ body });
    const dest = join(dir, 'model.gguf');
    await writeFile(`${dest}.part`, body);
    await downloadFile({ url: `${server.url}/file`, dest, sha256, expectedBytes: body.length });
    expect((await readFile(dest)).equals(body)).toBe(true);
  });

  it('follows redirects', async () => {
    server = await startRangeServer({ body });
    const dest = join(dir, 'model.gguf');
    await downloadFile({ url: `${server.url}/redirect`, dest, sha256 });
    expect(server.requests.map((r) => r.path)).toEqual(['/redirect', '/file']);
  });

  it('refuses a file whose sha256 does not match and removes it', async () => {
    server = await startRangeServer({ body });
    const dest = join(dir, 'model.gguf');
    const wrong = '0'.repeat(64);
    await expect(downloadFile({ url: `${server.url}/file`, dest, sha256: wrong })).rejects.toSatisfy((e) => isKiwiError(e, 'CHECKSUM_MISMATCH'));
    await expect(access(dest)).rejects.toThrow();
    await expect(access(`${dest}.part`)).rejects.toThrow();
  });

  it('refuses a file of another size than expected before writing it', async () => {
    server = await startRangeServer({ body });
    const dest = join(dir, 'model.gguf');
    await expect(downloadFile({ url: `${server.url}/file`, dest, expectedBytes: 1234 })).rejects.toThrow(/offers 300000 bytes but 1234/);
  });

  it('turns an HTTP error into DOWNLOAD_FAILED naming the status', async () => {
    server = await startRangeServer({ body, status: 404 });
    await expect(downloadFile({ url: `${server.url}/file`, dest: join(dir, 'x') })).rejects.toThrow(/HTTP 404/);
  });

  it('turns an unreachable host into DOWNLOAD_FAILED', async () => {
    await expect(downloadFile({ url: 'http://127.0.0.1:9/none', dest: join(dir, 'x') })).rejects.toSatisfy((e) => isKiwiError(e, 'DOWNLOAD_FAILED'));
  });
});

describe('formatProgress', () => {
  it('shows percent and megabytes', () => {
    expect(formatProgress('m.gguf', { receivedBytes: 500_000, totalBytes: 1_000_000, resumed: false })).toBe('m.gguf  50% 0.5/1.0 MB');
    expect(formatProgress('m.gguf', { receivedBytes: 500_000, totalBytes: undefined, resumed: false })).toBe('m.gguf 0.5 MB');
  });
});
