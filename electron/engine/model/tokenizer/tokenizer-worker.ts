// The worker thread of off-thread-encoder.ts: builds the model's tokenizer from its GGUF metadata
// once, then answers each { id, text, options } with the ids encode() gives (or the error).
import { parentPort, workerData } from 'node:worker_threads';
import type { GgufMetadata } from '../gguf/gguf-metadata.js';
import { createTokenizer, type EncodeOptions } from './tokenizer.js';

export interface EncodeJob {
  id: number;
  text: string;
  options: EncodeOptions;
}

export type EncodeAnswer = { id: number; ids: Int32Array } | { id: number; error: { code: string | undefined; message: string; details: unknown } };

const tokenizer = createTokenizer((workerData as { metadata: GgufMetadata }).metadata);
const port = parentPort;
if (port === null) throw new Error('tokenizer-worker.ts runs as a worker thread');
port.on('message', (job: EncodeJob) => {
  let answer: EncodeAnswer;
  try {
    answer = { id: job.id, ids: Int32Array.from(tokenizer.encode(job.text, job.options)) };
  } catch (err) {
    const e = err as { code?: string; message?: string; details?: unknown };
    answer = { id: job.id, error: { code: e.code, message: e.message ?? String(err), details: e.details ?? {} } };
  }
  port.postMessage(answer, 'ids' in answer ? [answer.ids.buffer as ArrayBuffer] : []);
});
