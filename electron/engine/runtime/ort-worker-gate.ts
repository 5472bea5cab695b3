// A flag pair shared (SharedArrayBuffer) between the process and each session worker, so the
// process never ends a worker inside a native onnxruntime call: terminating a thread there (by
// worker.terminate() or process.exit(), which stops every worker) aborts the whole process in
// onnxruntime-node ("terminate called after throwing an instance of 'Napi::Error'", exit 134).
// The worker marks itself BUSY around each native call and starts none once CLOSING is set; at
// exit the process sets CLOSING and waits until no worker is BUSY.

const BUSY = 0;
const CLOSING = 1;

/** How long exit waits for native calls in flight (a long prefill) before it gives up. */
const EXIT_WAIT_MS = 60_000;

export type Gate = Int32Array;

export function newGate(): Gate {
  return new Int32Array(new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT));
}

/** Worker side: runs `call` marked BUSY, or returns undefined without running it once CLOSING. */
export async function gated<T>(gate: Gate, call: () => Promise<T>): Promise<T | undefined> {
  Atomics.store(gate, BUSY, 1);
  try {
    if (Atomics.load(gate, CLOSING) === 1) return undefined;
    return await call();
  } finally {
    Atomics.store(gate, BUSY, 0);
    Atomics.notify(gate, BUSY);
  }
}

const live = new Set<Gate>();
let guarded = false;

/** Process side: a live worker's gate, closed and waited for when the process exits. */
export function watchGate(gate: Gate): () => void {
  live.add(gate);
  if (!guarded) {
    guarded = true;
    process.once('exit', closeAll);
  }
  return () => live.delete(gate);
}

/** Process side: whether a live worker is inside a native call now (diagnostics; stage-worker.process.test.ts exits in one). */
export function nativeCallInFlight(): boolean {
  for (const g of live) if (Atomics.load(g, BUSY) === 1) return true;
  return false;
}

function closeAll(): void {
  for (const g of live) Atomics.store(g, CLOSING, 1);
  const deadline = Date.now() + EXIT_WAIT_MS;
  for (const g of live) {
    while (Atomics.load(g, BUSY) === 1 && Date.now() < deadline) Atomics.wait(g, BUSY, 1, 100);
  }
}
