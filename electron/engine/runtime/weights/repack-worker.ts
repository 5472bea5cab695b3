// The worker thread of repack-pool.ts: converts each { id, form, bytes, n, k } with toLinear
// (convert.ts, the same code as on the main thread) and answers with the arrays, transferred.
import { parentPort } from 'node:worker_threads';
import { toLinear } from './convert.js';
import type { RepackAnswer, RepackJob } from './repack-pool.js';

const port = parentPort;
if (port === null) throw new Error('repack-worker.ts runs as a worker thread');
port.on('message', (job: RepackJob) => {
  let answer: RepackAnswer;
  try {
    const weight = toLinear(job.form, job.bytes, job.n, job.k, job.layout);
    answer = { id: job.id, weight };
  } catch (err) {
    const e = err as { code?: string; message?: string; details?: unknown };
    answer = { id: job.id, error: { code: e.code, message: e.message ?? String(err), details: e.details ?? {} } };
  }
  const transfer: ArrayBuffer[] = [];
  if ('weight' in answer) {
    const w = answer.weight;
    const arrays = w.kind === 'float' ? [w.weight] : [w.b, w.scales, ...(w.blockOffsets !== undefined ? [w.blockOffsets] : []), ...(w.zeroPoints !== undefined ? [w.zeroPoints] : [])];
    for (const a of arrays) transfer.push(a.buffer as ArrayBuffer);
  }
  port.postMessage(answer, transfer);
});
