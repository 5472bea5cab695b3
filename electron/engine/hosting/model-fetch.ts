// Hosting a model given by URL (`kiwi serve --model URL`, `kiwi host --model-url URL`, the app):
// the one owner of where such a model lives in the cache and of what may become a cache entry.
// The bytes come through model/download.ts (resumed from a partial file), under a policy for
// untrusted servers: at most MAX_MODEL_REDIRECTS redirects, never from https to http, to another
// host only over https (Hugging Face's /resolve/ links redirect to a CDN host); the server must say
// how big the file is and the download stops there. The finished file becomes the cache entry
// only once its size is the announced one, it parses as GGUF with every tensor inside it, and its
// sha256 is the expected one when given. A cache entry is checked again (size, GGUF, sha256)
// before it is used, and a bad one is downloaded again. Layout: models/<sha256(url) prefix>/<file
// name from the URL>, with <file>.entry.json recording the checked size (and sha256).
import { createHash } from 'node:crypto';
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isKiwiError, KiwiError } from '../errors.js';
import { downloadFile, sha256File } from '../model/download.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { kiwiCacheDir } from '../paths.js';
import type { ModelFetcher, ModelFetchProgress } from './control-hooks.js';

/** The speed shown is over this recent window, so a stall shows as a falling rate. */
const SPEED_WINDOW_MS = 3000;
/** Hugging Face needs one (resolve → CDN); a few more allow a mirror in front. */
export const MAX_MODEL_REDIRECTS = 5;

/** The cached file's name for a model URL: the URL's last path segment, decoded, made safe for a file name. */
export function modelFileName(url: string): string {
  const parsed = parseModelUrl(url);
  let last = '';
  try {
    last = decodeURIComponent(basename(parsed.pathname));
  } catch {
    last = basename(parsed.pathname);
  }
  return safeName(last);
}

/** Where the model at `url` lives in the cache; one folder per URL keeps the file's own name (the model's name in the API). */
export function modelCachePath(url: string, cacheDir: string = kiwiCacheDir()): string {
  return join(urlFolder(url, cacheDir), modelFileName(url));
}

/** Whether a `--model` argument is a URL to download rather than a file path. */
export function isModelUrl(text: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
}

function parseModelUrl(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new KiwiError('CONTROL_BAD_REQUEST', `'${url}' is not a URL; give an http:// or https:// address of a GGUF file.`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new KiwiError('CONTROL_BAD_REQUEST', `Models download over http:// or https://, not ${parsed.protocol}`);
  }
  return parsed;
}

function safeName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 200) || 'model.gguf';
}

function urlFolder(url: string, cacheDir: string): string {
  return join(cacheDir, 'models', createHash('sha256').update(url).digest('hex').slice(0, 16));
}

/**
 * The name `kiwi host --model-url` gave the file before this module owned the cache path: the
 * last segment not decoded (`my%20model.gguf` → `my_20model.gguf`). Found and renamed, not fetched again.
 */
function legacyFileName(url: string): string {
  return safeName(basename(new URL(url).pathname));
}

/** Bytes per second over the recent window of progress samples. */
export class SpeedMeter {
  private readonly samples: Array<{ at: number; bytes: number }> = [];

  constructor(private readonly windowMs = SPEED_WINDOW_MS) {}

  /** Records the running byte count; returns the speed, or undefined until two samples span some time. */
  add(bytes: number, at: number): number | undefined {
    this.samples.push({ at, bytes });
    while (this.samples.length > 2 && at - (this.samples[1] as { at: number }).at >= this.windowMs) this.samples.shift();
    const first = this.samples[0] as { at: number; bytes: number };
    const span = at - first.at;
    return span > 0 ? ((bytes - first.bytes) * 1000) / span : undefined;
  }
}

/** Why a redirect from `from` to `to` is refused, or undefined when it may be followed. */
export function redirectRefusal(from: URL, to: URL): string | undefined {
  if (to.protocol !== 'http:' && to.protocol !== 'https:') return `it redirects to ${to.protocol} (only http and https are followed)`;
  if (from.protocol === 'https:' && to.protocol === 'http:') return `it redirects from https to plain http (${to.origin})`;
  if (to.origin === from.origin || to.protocol === 'https:') return undefined;
  return `it redirects to another host over plain http (${from.origin} → ${to.origin}); give the final address, or an https one`;
}

export interface FetchModelOptions {
  /** Default: Kiwi's cache folder ($KIWI_CACHE_DIR). */
  cacheDir?: string;
  /** The file's expected sha256 (hex): checked after the download and before a cached copy is used. */
  sha256?: string;
  onProgress?: (p: ModelFetchProgress) => void;
  /** Called when a cached copy is bad and is downloaded again (or an old-named copy is adopted). */
  onNotice?: (message: string) => void;
  signal?: AbortSignal;
  /** Injected for tests; defaults to the global fetch. */
  fetchImpl?: typeof fetch;
  now?: () => number;
}

export interface FetchedModel {
  path: string;
  bytes: number;
  /** False when a checked cache entry was used. */
  downloaded: boolean;
}

interface CacheEntry {
  url: string;
  bytes: number;
  mtimeMs: number;
  /** Set once the file's sha256 was computed (checked against an expected one). */
  sha256?: string;
}

/** The model at `url` as a checked cache entry: used as it is when good, else downloaded (resuming a partial file). */
export async function fetchModel(url: string, opts: FetchModelOptions = {}): Promise<FetchedModel> {
  const cacheDir = opts.cacheDir ?? kiwiCacheDir();
  const dest = modelCachePath(url, cacheDir);
  const sha256 = opts.sha256 === undefined ? undefined : checkSha256(opts.sha256);
  await adoptLegacyName(url, dest, opts.onNotice);

  const cached = await checkCached(url, dest, sha256);
  if (cached.ok) {
    opts.onProgress?.({ receivedBytes: cached.bytes, totalBytes: cached.bytes, bytesPerSecond: undefined, resumed: false });
    return { path: dest, bytes: cached.bytes, downloaded: false };
  }
  if (cached.reason !== undefined) {
    opts.onNotice?.(`The cached copy of ${url} is not usable (${cached.reason}); downloading it again.`);
    await removeEntry(dest);
  }

  // Downloaded beside the entry; it becomes the entry only after the checks below.
  const staged = `${dest}.download`;
  await rm(staged, { force: true });
  const now = opts.now ?? Date.now;
  const meter = new SpeedMeter();
  let first: number | undefined;
  const guard = new DownloadGuard(url, opts.fetchImpl ?? fetch, opts.signal);
  try {
    await downloadFile({
      url,
      dest: staged,
      signal: guard.signal,
      fetchImpl: guard.fetch,
      ...(sha256 !== undefined ? { sha256 } : {}),
      onProgress: (p) => {
        // A resumed download's speed counts only the bytes of this attempt.
        first ??= p.receivedBytes;
        opts.onProgress?.({ receivedBytes: p.receivedBytes, totalBytes: p.totalBytes, bytesPerSecond: meter.add(p.receivedBytes - first, now()), resumed: p.resumed });
      },
    });
  } catch (err) {
    if (guard.refusal !== undefined) throw guard.refusal;
    throw err;
  } finally {
    guard.dispose();
  }

  try {
    const bytes = (await stat(staged)).size;
    if (guard.totalBytes !== undefined && bytes !== guard.totalBytes) {
      throw new KiwiError('DOWNLOAD_FAILED', `download of ${url} holds ${bytes} bytes but the server announced ${guard.totalBytes}; run the command again.`, { url });
    }
    await checkGguf(staged, url);
    await rename(staged, dest);
    await writeEntry(dest, { url, bytes, mtimeMs: (await stat(dest)).mtimeMs, ...(sha256 !== undefined ? { sha256 } : {}) });
    return { path: dest, bytes, downloaded: true };
  } finally {
    await rm(staged, { force: true });
  }
}

/** The control API's fetcher (the app): the same cache and checks as the CLI. */
export interface ModelFetcherOptions {
  cacheDir?: string;
  fetchImpl?: typeof fetch;
  now?: () => number;
}

export function modelFetcher(opts: ModelFetcherOptions = {}): ModelFetcher {
  return {
    fileName: modelFileName,
    async fetch(url: string, onProgress: (p: ModelFetchProgress) => void, signal: AbortSignal, sha256?: string): Promise<string> {
      return (await fetchModel(url, { ...opts, onProgress, signal, ...(sha256 !== undefined ? { sha256 } : {}) })).path;
    },
  };
}

function checkSha256(text: string): string {
  const hex = text.trim().toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new KiwiError('USAGE', `an expected sha256 is 64 hex digits, got '${text}'`);
  return hex;
}

/** Follows the download policy for every request downloadFile makes; a refusal aborts the download. */
class DownloadGuard {
  private readonly abort = new AbortController();
  private readonly unlink: () => void;
  private redirects = 0;
  refusal: KiwiError | undefined;
  /** The file's size as the server announced it (Content-Range total, else Content-Length). */
  totalBytes: number | undefined;

  constructor(private readonly url: string, private readonly base: typeof fetch, outer: AbortSignal | undefined) {
    const onAbort = (): void => this.abort.abort(outer?.reason);
    outer?.addEventListener('abort', onAbort, { once: true });
    if (outer?.aborted === true) onAbort();
    this.unlink = () => outer?.removeEventListener('abort', onAbort);
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  dispose(): void {
    this.unlink();
  }

  readonly fetch: typeof fetch = async (input, init) => {
    this.abort.signal.throwIfAborted();
    const current = new URL(input instanceof Request ? input.url : String(input));
    const response = await this.base(input, init);
    const location = response.headers.get('location');
    if (response.status >= 300 && response.status < 400 && location !== null) {
      this.redirects++;
      const why = this.redirects > MAX_MODEL_REDIRECTS ? `it redirects more than ${MAX_MODEL_REDIRECTS} times` : redirectRefusal(current, new URL(location, current));
      if (why !== undefined) return this.refuse(response, why);
      return response;
    }
    if (response.status === 416) this.totalBytes = announcedTotal(response);
    if (response.status === 200 || response.status === 206) {
      const total = announcedTotal(response);
      if (total === undefined) return this.refuse(response, 'the server does not say how big the file is (no Content-Length), so a complete download cannot be told from a truncated or endless one');
      this.totalBytes = total;
    }
    return response;
  };

  /** Records why, aborts, and hands downloadFile a bodiless failure (fetchModel then throws the refusal). */
  private async refuse(response: Response, why: string): Promise<Response> {
    this.refusal = new KiwiError('DOWNLOAD_FAILED', `refused to download ${this.url}: ${why}.`, { url: this.url });
    this.abort.abort(this.refusal);
    await response.body?.cancel();
    return new Response(null, { status: 502, statusText: 'refused' });
  }
}

function announcedTotal(response: Response): number | undefined {
  const range = response.headers.get('content-range');
  const total = range !== null ? /\/(\d+)\s*$/.exec(range)?.[1] : undefined;
  if (total !== undefined) return Number(total);
  const length = response.headers.get('content-length');
  return response.status === 200 && length !== null && /^\d+$/.test(length) ? Number(length) : undefined;
}

/** Throws unless `path` is a GGUF whose header parses and whose tensors all lie inside the file. */
async function checkGguf(path: string, url: string): Promise<void> {
  try {
    await openGguf(path);
  } catch (err) {
    if (!isKiwiError(err)) throw err;
    throw new KiwiError('GGUF_INVALID', `the file downloaded from ${url} is not a usable GGUF model (${err.message}); it was not kept. Check that the address is a .gguf file.`, { url });
  }
}

type CachedState = { ok: true; bytes: number } | { ok: false; reason: string | undefined };

/** Whether the entry at `dest` may be used: the size it was checked at, a GGUF, the expected sha256. */
async function checkCached(url: string, dest: string, sha256: string | undefined): Promise<CachedState> {
  const st = await stat(dest).catch(() => undefined);
  if (st === undefined) return { ok: false, reason: undefined };
  if (!st.isFile()) return { ok: false, reason: 'not a file' };
  const entry = await readEntry(dest);
  if (entry !== undefined && entry.bytes !== st.size) return { ok: false, reason: `${st.size} bytes where ${entry.bytes} were downloaded` };
  try {
    await openGguf(dest);
  } catch (err) {
    if (!isKiwiError(err)) throw err;
    return { ok: false, reason: err.message };
  }
  let known = entry !== undefined && entry.mtimeMs === st.mtimeMs ? entry.sha256 : undefined;
  if (sha256 !== undefined && known !== sha256) {
    known = await sha256File(dest);
    if (known !== sha256) return { ok: false, reason: `sha256 ${known}, expected ${sha256}` };
  }
  // A file without its record (an older Kiwi's download) is recorded now that it passed.
  if (entry === undefined || entry.mtimeMs !== st.mtimeMs || entry.sha256 !== known) {
    await writeEntry(dest, { url, bytes: st.size, mtimeMs: st.mtimeMs, ...(known !== undefined ? { sha256: known } : {}) });
  }
  return { ok: true, bytes: st.size };
}

/** Renames a file (and its partial download) saved under the old CLI name to the one name used now. */
async function adoptLegacyName(url: string, dest: string, onNotice: FetchModelOptions['onNotice']): Promise<void> {
  const legacy = join(dirname(dest), legacyFileName(url));
  const exists = async (p: string): Promise<boolean> => stat(p).then(() => true, () => false);
  if (legacy !== dest && !(await exists(dest)) && (await exists(legacy))) {
    await rename(legacy, dest);
    onNotice?.(`Using the earlier download ${legacy}, now named ${basename(dest)}.`);
  }
  // Partial downloads: the old CLI's (legacy name) and the old UI's (beside the entry, not staged).
  for (const part of [`${legacy}.part`, `${dest}.part`]) {
    if (!(await exists(`${dest}.download.part`)) && (await exists(part))) await rename(part, `${dest}.download.part`);
  }
}

function entryPath(dest: string): string {
  return `${dest}.entry.json`;
}

async function readEntry(dest: string): Promise<CacheEntry | undefined> {
  try {
    const v = JSON.parse(await readFile(entryPath(dest), 'utf8')) as Partial<CacheEntry>;
    if (typeof v.bytes !== 'number' || typeof v.mtimeMs !== 'number' || typeof v.url !== 'string') return undefined;
    return { url: v.url, bytes: v.bytes, mtimeMs: v.mtimeMs, ...(typeof v.sha256 === 'string' ? { sha256: v.sha256 } : {}) };
  } catch {
    // No record (or an unreadable one): the file is checked in full instead.
    return undefined;
  }
}

async function writeEntry(dest: string, entry: CacheEntry): Promise<void> {
  await writeFile(entryPath(dest), `${JSON.stringify(entry)}\n`);
}

async function removeEntry(dest: string): Promise<void> {
  await rm(dest, { force: true });
  await rm(entryPath(dest), { force: true });
}
