// The engine's onnxruntime session factory (ort/ is the one owner of onnxruntime-node): picks the
// execution provider (CUDA, DirectML, else CPU, or an explicit override), tunes the CPU path,
// creates sessions and runs them. Everything else in the engine sees plain typed arrays and
// `OrtValue`s from here. The session runs here, in-thread; runtime/ort-worker-session.ts runs the
// same session on a worker thread.
import * as ort from 'onnxruntime-node';
import os from 'node:os';
import { KiwiError } from '../errors.js';
import { providerLibraryInstalled } from './providers.js';

export type ExecutionProvider = 'cuda' | 'dml' | 'cpu';

export interface SessionFactoryOptions {
  /** Force one provider; without it the best present one is used. */
  provider?: ExecutionProvider;
  /** CPU intra-op threads; default: the number of physical-ish cores (os.availableParallelism). */
  threads?: number;
}

export type OrtTensor = ort.Tensor;
export type OrtFeeds = Record<string, ort.Tensor>;

export interface StageSession {
  readonly provider: ExecutionProvider;
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  /**
   * Runs the session: the outputs named in `fetches` (default all), each in a new tensor. The
   * feeds stay the caller's (a worker session copies them). A failed run rejects with a KiwiError (RUNTIME_RUN_FAILED, or RUNTIME_WORKER_FAILED when a
   * worker thread died).
   */
  run(feeds: OrtFeeds, fetches?: readonly string[]): Promise<Record<string, ort.Tensor>>;
  dispose(): Promise<void>;
}

/** Providers this build of onnxruntime-node can use on this platform, best first. */
export function availableProviders(): ExecutionProvider[] {
  const backends = new Set(ort.listSupportedBackends().map((b) => b.name));
  const out: ExecutionProvider[] = [];
  // The CUDA provider is a separate library that the npm install may have skipped.
  if (backends.has('cuda') && process.platform === 'linux' && providerLibraryInstalled('cuda')) out.push('cuda');
  if (backends.has('dml') && process.platform === 'win32') out.push('dml');
  out.push('cpu');
  return out;
}

export function defaultThreads(): number {
  return Math.max(1, os.availableParallelism());
}

function sessionOptions(provider: ExecutionProvider, threads: number): ort.InferenceSession.SessionOptions {
  return {
    executionProviders: [provider],
    // 'all' enables the contrib fusions and constant folding of weight casts.
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    // Stages are a single chain of ops: inter-op parallelism only adds thread hand-offs.
    interOpNumThreads: 1,
    executionMode: 'sequential',
    enableCpuMemArena: true,
    enableMemPattern: true,
    // Idle intra-op threads sleep instead of spinning. Kiwi shares its machine (a desktop, other
    // members' work, llama.cpp in benchmarks): a spinning worker takes the core that the thread it
    // waits for needs. Measured on the 2-core dev machine with neighbours (bench/stage-profile.ts,
    // 1B Q4_0 decode step, alternating): median 108 ms without spinning vs 169 ms with, best runs
    // equal (55 vs 57 ms).
    extra: { session: { intra_op: { allow_spinning: '0' } } },
    logSeverityLevel: 3,
  };
}

/**
 * Creates a session from a model file (external data resolved next to it) or model bytes.
 * Without an override, providers are tried best first; a provider that fails to start (driver
 * or library missing) is skipped and the reason kept in `skipped`.
 */
export async function createStageSession(
  model: string | Uint8Array,
  opts: SessionFactoryOptions = {},
): Promise<StageSession & { skipped: string[] }> {
  const threads = opts.threads ?? defaultThreads();
  const candidates = opts.provider !== undefined ? [opts.provider] : availableProviders();
  const skipped: string[] = [];
  for (const provider of candidates) {
    let session: ort.InferenceSession;
    try {
      session =
        typeof model === 'string'
          ? await ort.InferenceSession.create(model, sessionOptions(provider, threads))
          : await ort.InferenceSession.create(model, sessionOptions(provider, threads));
    } catch (err) {
      const message = (err as Error).message;
      if (opts.provider !== undefined || provider === 'cpu') {
        throw new KiwiError('RUNTIME_SESSION_FAILED', `onnxruntime could not create a ${provider} session: ${message}`, {
          provider,
        });
      }
      skipped.push(`${provider}: ${message}`);
      continue;
    }
    return {
      provider,
      skipped,
      inputNames: session.inputNames,
      outputNames: session.outputNames,
      run: async (feeds, fetches) => {
        try {
          return { ...((await (fetches !== undefined ? session.run(feeds, [...fetches]) : session.run(feeds))) as Record<string, ort.Tensor>) };
        } catch (err) {
          throw runFailed(err);
        }
      },
      dispose: () => session.release(),
    };
  }
  throw new KiwiError('RUNTIME_SESSION_FAILED', 'no execution provider could start');
}

/** An onnxruntime error of a run (shapes, memory) as the KiwiError both session kinds report. */
export function runFailed(err: unknown): KiwiError {
  if (err instanceof KiwiError) return err;
  return new KiwiError('RUNTIME_RUN_FAILED', `onnxruntime failed to run the stage: ${(err as Error).message ?? String(err)}`);
}

/** The typed arrays that cross between sessions and their callers. */
export type TensorData = Float32Array | Int32Array | BigInt64Array;

/** A tensor over `data` (float32, int32 or int64 by its array type); no copy. */
export function tensorOf(data: TensorData, dims: readonly number[]): ort.Tensor {
  if (data instanceof Float32Array) return new ort.Tensor('float32', data, dims);
  if (data instanceof Int32Array) return new ort.Tensor('int32', data, dims);
  return new ort.Tensor('int64', data, dims);
}

/** The data of a float32, int32 or int64 tensor (the only types stage graphs use). */
export function tensorData(t: ort.Tensor, what: string): TensorData {
  if (t.type === 'float32' || t.type === 'int32' || t.type === 'int64') return t.data as TensorData;
  throw new Error(`tensor ${what} has type ${t.type}; stage sessions carry float32, int32 and int64 only`);
}

export function f32Tensor(data: Float32Array, dims: readonly number[]): ort.Tensor {
  return new ort.Tensor('float32', data, dims);
}

export function i32Tensor(data: Int32Array, dims: readonly number[]): ort.Tensor {
  return new ort.Tensor('int32', data, dims);
}

export function tensorF32(t: ort.Tensor | undefined, what: string): Float32Array {
  if (t === undefined || t.type !== 'float32') throw new Error(`stage output ${what} missing or not float32`);
  return t.data as Float32Array;
}
