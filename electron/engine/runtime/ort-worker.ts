// The worker thread of a stage session (started by ort-worker-session.ts): it owns one onnxruntime
// session at a time, so the native run blocks this thread instead of the process's event loop, and
// the K/V buffers of that session's request caches (kv-buffers.ts), which never leave the thread.
// Messages are handled one at a time, in order, so a dispose waits for the runs sent before it.
import { parentPort, workerData } from 'node:worker_threads';
import { createStageSession } from '../ort/session.js';
import type { OrtTensor, StageSession } from '../ort/session.js';
import { gated } from './ort-worker-gate.js';
import { KvBuffers, runWithKv } from './kv-buffers.js';
import type { KvRun } from './kv-buffers.js';
import type { Gate } from './ort-worker-gate.js';
import { errorToWire, fromWire, toWire, transferables } from './ort-worker-protocol.js';
import type { FromWorker, ToWorker, WireTensor } from './ort-worker-protocol.js';

const port = parentPort;
if (port === null) throw new Error('ort-worker.ts runs as a worker thread (see ort-worker-session.ts)');

const gate = (workerData as { gate: Gate }).gate;
let session: StageSession | undefined;
let kv: KvBuffers | undefined;
let queue: Promise<void> = Promise.resolve();

function reply(m: FromWorker, tensors: Iterable<WireTensor> = []): void {
  const transfer = transferables([...tensors].map((t) => t.data));
  try {
    port!.postMessage(m, transfer);
  } catch (err) {
    // A buffer that cannot move (one onnxruntime owns, say) is copied instead.
    if ((err as Error).name !== 'DataCloneError' || transfer.length === 0) throw err;
    port!.postMessage(m);
  }
}

async function handle(m: ToWorker): Promise<void> {
  switch (m.type) {
    case 'create':
      try {
        const s = await gated(gate, () => createStageSession(m.model, m.opts));
        if (s === undefined) return; // the process is exiting
        session = s;
        kv = m.kv !== undefined ? new KvBuffers(m.kv) : undefined;
        reply({ type: 'created', provider: s.provider, skipped: s.skipped, inputNames: [...s.inputNames], outputNames: [...s.outputNames] });
      } catch (err) {
        reply({ type: 'create-failed', error: errorToWire(err) });
      }
      return;
    case 'run':
      return run(m.id, m.feeds, m.fetches, m.kv);
    case 'kv-create':
      return kvOp(m.id, () => kv?.create(m.id, m.allocated), (why) => `KV cache ${m.id} could not be allocated (${why}); give the process more memory or lower the context`);
    case 'kv-copy':
      return kvOp(m.to, () => kv?.copy(m.from, m.to, m.length, m.allocated), (why) => `KV cache ${m.to} could not be made as a copy of cache ${m.from} (${why})`);
    case 'kv-free':
      kv?.free(m.id);
      return;
    case 'kv-read':
      try {
        if (kv === undefined) throw new Error('the session keeps no KV caches');
        const { keys, values } = kv.read(m.cache, m.length);
        reply({ type: 'kv-read', id: m.id, keys, values }, [...keys, ...values].map((data) => ({ data, dims: [] })));
      } catch (err) {
        reply({ type: 'kv-read-failed', id: m.id, error: errorToWire(err) });
      }
      return;
    case 'dispose':
      if (session !== undefined) await gated(gate, session.dispose.bind(session));
      session = undefined;
      kv = undefined;
      // The thread stays for the next session (ort-worker-pool.ts) until told to close.
      reply({ type: 'disposed' });
      return;
    case 'close':
      port!.close();
      return;
  }
}

/**
 * A cache operation that fails (no memory for the buffers, a copy's source already freed) leaves
 * cache `id` broken: the run that uses it fails with `explain(why)`.
 */
function kvOp(id: number, op: () => void, explain: (why: string) => string): void {
  try {
    op();
  } catch (err) {
    kv?.broken(id, explain(err instanceof Error ? err.message : String(err)));
  }
}

async function run(id: number, wireFeeds: Record<string, WireTensor>, fetches: string[] | undefined, kvRun: KvRun | undefined): Promise<void> {
  const feeds: Record<string, OrtTensor> = {};
  for (const [name, w] of Object.entries(wireFeeds)) feeds[name] = fromWire(w);
  try {
    if (session === undefined) throw new Error('the session is not open');
    const s = session;
    if (kvRun !== undefined && kv === undefined) throw new Error('the session keeps no KV caches');
    const result = await gated(gate, () => (kvRun !== undefined ? runWithKv(kv!, (f, o) => s.run(f, o), feeds, fetches ?? s.outputNames, kvRun) : s.run(feeds, fetches)));
    if (result === undefined) return; // the process is exiting
    const outputs: Record<string, WireTensor> = {};
    for (const [name, t] of Object.entries(result)) outputs[name] = toWire(t, name);
    reply({ type: 'ran', id, outputs }, Object.values(outputs));
  } catch (err) {
    reply({ type: 'run-failed', id, error: errorToWire(err) });
  }
}

port.on('message', (m: ToWorker) => {
  queue = queue.then(() => handle(m));
});
