// The messages between a stage session's worker thread (ort-worker.ts) and its client in the
// calling thread (ort-worker-session.ts). Plain data only, so they cross postMessage; big buffers
// (hidden states, logits) travel in transfer lists, moved rather than copied. The K/V caches stay
// on the worker (kv-buffers.ts): messages name them by id.
import { KiwiError, type KiwiErrorCode } from '../errors.js';
import { tensorData, tensorOf } from '../ort/session.js';
import type { ExecutionProvider, OrtTensor, SessionFactoryOptions, TensorData } from '../ort/session.js';
import type { KvLayout, KvRun } from './kv-buffers.js';

export interface WireTensor {
  data: TensorData;
  dims: number[];
}

export type ToWorker =
  /** kv: the layout of the session's request caches, kept on the worker (none for a session without them). */
  | { type: 'create'; model: string | Uint8Array; opts: SessionFactoryOptions; kv: KvLayout | undefined }
  /** fetches: the outputs to return (undefined: all). kv: the caches the run reads and appends to (runWithKv). */
  | { type: 'run'; id: number; feeds: Record<string, WireTensor>; fetches: string[] | undefined; kv: KvRun | undefined }
  /** The session's request caches (KvHost): done in order with the runs, answered by nothing (a failure shows in the next run that uses the cache). */
  | { type: 'kv-create'; id: number; allocated: number }
  | { type: 'kv-copy'; from: number; to: number; length: number; allocated: number }
  | { type: 'kv-free'; id: number }
  /** Copies of a cache's first `length` positions, answered by kv-read (tests, diagnostics). */
  | { type: 'kv-read'; id: number; cache: number; length: number }
  /** Releases the session; the thread stays for another create. */
  | { type: 'dispose' }
  /** Ends the thread by letting its event loop run empty. terminate() is kept for threads that do
   * not answer: terminating one whose session was released can abort the whole process in
   * onnxruntime-node's teardown ("terminate called after throwing an instance of 'Napi::Error'"). */
  | { type: 'close' };

export interface WireError {
  /** A KiwiError's code (the worker runs this same build), undefined for any other error. */
  code: KiwiErrorCode | undefined;
  message: string;
  details: Record<string, unknown>;
}

export type FromWorker =
  | { type: 'created'; provider: ExecutionProvider; skipped: string[]; inputNames: string[]; outputNames: string[] }
  | { type: 'create-failed'; error: WireError }
  | { type: 'ran'; id: number; outputs: Record<string, WireTensor> }
  | { type: 'run-failed'; id: number; error: WireError }
  | { type: 'kv-read'; id: number; keys: Float32Array[]; values: Float32Array[] }
  | { type: 'kv-read-failed'; id: number; error: WireError }
  | { type: 'disposed' };

export function toWire(t: OrtTensor, what: string): WireTensor {
  return { data: tensorData(t, what), dims: [...t.dims] };
}

export function fromWire(w: WireTensor): OrtTensor {
  return tensorOf(w.data, w.dims);
}

/** Buffers that can move with a message: each array's whole buffer, once. A view of part of a
 * buffer (a subarray, a pooled Buffer) is left to be copied. */
export function transferables(arrays: Iterable<ArrayBufferView>): ArrayBuffer[] {
  const out = new Set<ArrayBuffer>();
  for (const data of arrays) {
    const buf = data.buffer;
    if (buf instanceof ArrayBuffer && data.byteOffset === 0 && data.byteLength === buf.byteLength && buf.byteLength > 0) out.add(buf);
  }
  return [...out];
}

export function errorToWire(err: unknown): WireError {
  if (err instanceof KiwiError) return { code: err.code, message: err.message, details: { ...err.details } };
  return { code: undefined, message: err instanceof Error ? err.message : String(err), details: {} };
}

/** The caller's side of a worker error: KiwiErrors keep their code, anything else gets `fallback`. */
export function errorFromWire(e: WireError, fallback: KiwiErrorCode, prefix: string): KiwiError {
  if (e.code !== undefined) return new KiwiError(e.code, e.message, e.details);
  return new KiwiError(fallback, `${prefix}: ${e.message}`, e.details);
}
