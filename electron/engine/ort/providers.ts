// The execution providers of this build of onnxruntime-node: which backends it lists, whether a
// provider's separate library is installed beside its binary, and a probe session (one provider,
// fixed float32 inputs) that device/ uses to check a provider and to time its memory. The
// native binary is loaded lazily here, so the rest of the device probe works where it cannot load;
// session.ts, the runtime's session factory, loads it when imported.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { InferenceSession } from 'onnxruntime-node';

export interface ListedBackend {
  name: string;
  /** Shipped inside the onnxruntime-node package (false: needs a separately installed library). */
  bundled: boolean;
}

function loadOrt(): Promise<typeof import('onnxruntime-node')> {
  return import('onnxruntime-node');
}

/** The backends this build of onnxruntime-node lists; the CPU provider is always among them. */
export async function listedBackends(): Promise<ListedBackend[]> {
  const ort = await loadOrt();
  return typeof ort.listSupportedBackends === 'function' ? ort.listSupportedBackends() : [{ name: 'cpu', bundled: true }];
}

/** Providers that ship as a separate shared library, which the npm install may have skipped. */
const SEPARATE_LIBRARY = new Set(['cuda', 'tensorrt']);

/** Whether a provider ships inside the onnxruntime-node package (not as a separate library). */
export function providerBundled(name: string): boolean {
  return !SEPARATE_LIBRARY.has(name);
}

/** The onnxruntime-node package's folder (its package.json's directory). */
export function ortPackageDir(): string {
  return dirname(createRequire(import.meta.url).resolve('onnxruntime-node/package.json'));
}

/** The file name of a provider's separate library on this platform. */
export function providerLibraryFile(name: string): string {
  return process.platform === 'win32' ? `onnxruntime_providers_${name}.dll` : `libonnxruntime_providers_${name}.so`;
}

/**
 * Whether a provider's library is present beside onnxruntime-node's binary. Asking onnxruntime for
 * a provider whose library is missing prints error lines on stderr before it fails, so look first.
 */
export function providerLibraryInstalled(name: string): boolean {
  if (providerBundled(name)) return true;
  const dir = join(ortPackageDir(), 'bin', 'napi-v6', process.platform, process.arch);
  return existsSync(join(dir, providerLibraryFile(name)));
}

export interface ProbeSessionOptions {
  provider: string;
  /** The inputs of every run, made into tensors once. */
  feeds: Record<string, { data: Float32Array; dims: readonly number[] }>;
  /** onnxruntime's default ('all') unless given; 'disabled' keeps every node as built. */
  graphOptimizationLevel?: InferenceSession.SessionOptions['graphOptimizationLevel'];
  logSeverityLevel: 0 | 1 | 2 | 3 | 4;
}

/** A session on one provider that runs its graph on the same inputs each time. */
export interface ProbeSession {
  /** The float32 outputs of one run. */
  run(): Promise<Record<string, Float32Array>>;
  release(): Promise<void>;
}

/** Creates a probe session for `model` (ModelProto bytes); rejects with onnxruntime's error when the provider cannot start. */
export async function openProbeSession(model: Uint8Array, opts: ProbeSessionOptions): Promise<ProbeSession> {
  const ort = await loadOrt();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: [opts.provider],
    ...(opts.graphOptimizationLevel !== undefined ? { graphOptimizationLevel: opts.graphOptimizationLevel } : {}),
    logSeverityLevel: opts.logSeverityLevel,
  });
  const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {};
  for (const [name, f] of Object.entries(opts.feeds)) feeds[name] = new ort.Tensor('float32', f.data, f.dims);
  return {
    run: async () => {
      const out: Record<string, Float32Array> = {};
      for (const [name, t] of Object.entries(await session.run(feeds))) {
        if (t.type !== 'float32') throw new Error(`probe output ${name} has type ${t.type}; probe graphs give float32`);
        out[name] = t.data as Float32Array;
      }
      return out;
    },
    release: () => session.release(),
  };
}
