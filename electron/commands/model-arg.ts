// The model a command runs, from its flags: a GGUF path, a URL (downloaded into the cache through
// engine/hosting/model-fetch.ts, with progress at human rates and an optional --model-sha256), or
// nothing, for the embedded stories260K (models/ in the package). Shared by `serve` and `host`.
import { stat } from 'node:fs/promises';
import { KiwiError } from '../engine/errors.js';
import { fetchModel, isModelUrl, modelFileName } from '../engine/hosting/model-fetch.js';
import { defaultModelPath } from '../engine/paths.js';
import { ProgressRate, progressText } from '../engine/progress-rate.js';
import type { EventPrinter } from './session-io.js';

export interface ModelArgOptions {
  /** Used when no model is given; false: a model is required. */
  useDefault: boolean;
  sha256?: string | undefined;
  print: EventPrinter;
  signal?: AbortSignal;
  /** Where the flag's name is shown in messages. */
  flag?: string;
}

export interface ResolvedModel {
  path: string;
  /** The URL it came from, when it was given one. */
  url?: string;
  /** The embedded default model was used. */
  embedded: boolean;
}

/** A local GGUF path for `given` (a path, a URL or nothing); checks a path exists before anything starts. */
export async function resolveModelArg(given: string | undefined, opts: ModelArgOptions): Promise<ResolvedModel> {
  const flag = opts.flag ?? '--model';
  if (opts.sha256 !== undefined && (given === undefined || !isModelUrl(given))) {
    throw new KiwiError('USAGE', `--model-sha256 checks a download: give ${flag} a URL with it`);
  }
  if (given === undefined) {
    if (!opts.useDefault) throw new KiwiError('USAGE', `missing ${flag}`);
    const path = defaultModelPath();
    if (path === undefined) throw new KiwiError('FILE_NOT_FOUND', `the embedded default model (models/stories260K.gguf) is missing from this installation; pass ${flag} <file.gguf or URL>`);
    return { path, embedded: true };
  }
  if (isModelUrl(given)) return { ...(await downloadModel(given, opts)), embedded: false };
  const isFile = await stat(given).then((st) => st.isFile(), () => false);
  if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${given} does not exist. Pass the path of a GGUF file, or its http(s) URL.`);
  return { path: given, embedded: false };
}

async function downloadModel(url: string, opts: ModelArgOptions): Promise<{ path: string; url: string }> {
  let file: string;
  try {
    file = modelFileName(url);
  } catch (err) {
    throw new KiwiError('USAGE', (err as Error).message);
  }
  const { print } = opts;
  const rate = new ProgressRate();
  let announced = false;
  const got = await fetchModel(url, {
    ...(opts.sha256 !== undefined ? { sha256: opts.sha256 } : {}),
    ...(opts.signal !== undefined ? { signal: opts.signal } : {}),
    onNotice: (message) => print('warning', { message }, `warning: ${message}`),
    onProgress: (p) => {
      if (!announced && p.receivedBytes < (p.totalBytes ?? Infinity)) {
        announced = true;
        print('downloading', { url, file }, `Downloading ${file} from ${url}${p.resumed ? ' (resuming)' : ''}`);
      }
      if (!announced) return;
      const s = rate.update(p.receivedBytes, p.totalBytes ?? null);
      if (s === null) return;
      print.progress('download-progress', file, {
        file, received_bytes: s.done, total_bytes: s.total, bytes_per_s: s.rate, eta_s: s.etaSeconds, resumed: p.resumed, final: s.final,
      }, `${file}: ${progressText(s)}`, s.final);
    },
  });
  print('model', { path: got.path, url, bytes: got.bytes, downloaded: got.downloaded },
    got.downloaded ? `Model ${got.path} (downloaded)` : `Model ${got.path} (from the cache)`);
  return { path: got.path, url };
}
