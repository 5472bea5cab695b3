// Hosting a model given by URL: the file lands in Kiwi's model cache through model/download.ts
// (resumed from a partial file, moved into place only when complete), with progress and the
// recent speed for the UI. A complete file in the cache is used as it is. The cache layout is the
// one `kiwi host --model-url` uses: models/<sha256(url) prefix>/<file name from the URL>.
import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { KiwiError } from '../errors.js';
import { downloadFile } from '../model/download.js';
import { kiwiCacheDir } from '../paths.js';
import type { ModelFetcher, ModelFetchProgress } from '../server/control-api-source.js';

/** The speed shown is over this recent window, so a stall shows as a falling rate. */
const SPEED_WINDOW_MS = 3000;

/** The cached file's name for a model URL: the URL's last path segment, made safe for a file name. */
export function modelFileName(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new KiwiError('CONTROL_BAD_REQUEST', `'${url}' is not a URL; give an http:// or https:// address of a GGUF file.`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new KiwiError('CONTROL_BAD_REQUEST', `Models download over http:// or https://, not ${parsed.protocol}`);
  }
  let last = '';
  try {
    last = decodeURIComponent(basename(parsed.pathname));
  } catch {
    last = basename(parsed.pathname);
  }
  return last.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 200) || 'model.gguf';
}

/** Where the model at `url` lives in the cache; one folder per URL keeps the file's own name (the model's name in the API). */
export function modelCachePath(url: string, cacheDir: string = kiwiCacheDir()): string {
  return join(cacheDir, 'models', createHash('sha256').update(url).digest('hex').slice(0, 16), modelFileName(url));
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

export interface ModelFetcherOptions {
  /** Default: Kiwi's cache folder ($KIWI_CACHE_DIR). */
  cacheDir?: string;
  /** Injected for tests; defaults to the global fetch. */
  fetchImpl?: typeof fetch;
  now?: () => number;
}

export function modelFetcher(opts: ModelFetcherOptions = {}): ModelFetcher {
  const now = opts.now ?? Date.now;
  return {
    fileName: modelFileName,
    async fetch(url: string, onProgress: (p: ModelFetchProgress) => void, signal: AbortSignal): Promise<string> {
      const dest = modelCachePath(url, opts.cacheDir ?? kiwiCacheDir());
      const cached = await stat(dest).then((st) => (st.isFile() ? st.size : undefined), () => undefined);
      if (cached !== undefined) {
        onProgress({ receivedBytes: cached, totalBytes: cached, bytesPerSecond: undefined, resumed: false });
        return dest;
      }
      const meter = new SpeedMeter();
      let first: number | undefined;
      await downloadFile({
        url,
        dest,
        signal,
        ...(opts.fetchImpl !== undefined ? { fetchImpl: opts.fetchImpl } : {}),
        onProgress: (p) => {
          // A resumed download's speed counts only the bytes of this attempt.
          first ??= p.receivedBytes;
          onProgress({ receivedBytes: p.receivedBytes, totalBytes: p.totalBytes, bytesPerSecond: meter.add(p.receivedBytes - first, now()), resumed: p.resumed });
        },
      });
      return dest;
    },
  };
}
