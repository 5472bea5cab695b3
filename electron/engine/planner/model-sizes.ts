// The model as the planner sizes it, from a GGUF's summary: per-block and head bytes and KV bytes
// per token (used by `kiwi plan`, `kiwi host` and the UI's hosting alike). With the file itself
// (modelSizesFromGguf), memory is what the runtime really keeps resident per block and for the
// head (runtime/memory-model.ts: the packed layout onnxruntime keeps, measured by bench/memory.ts),
// plus the fixed cost of a stage process; without it, the GGUF bytes stand in.
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { summarizeModel } from '../model/model-summary.js';
import type { ModelSummary } from '../model/model-summary.js';
import { keptRowBytes, RUNTIME_KV_BYTES_PER_ELEMENT, scratchBytes, scratchBytesPerPosition, tensorResidentBytes } from '../runtime/memory-model.js';
import type { ModelSizes } from './fleet.js';

/** The runtime keeps K and V in f32 (runtime/stage.ts): 4 bytes per element. */
export const KV_BYTES_PER_ELEMENT = RUNTIME_KV_BYTES_PER_ELEMENT;

/**
 * Anonymous memory of a stage process besides its layers: Node, V8's heap, onnxruntime's library
 * and its worker thread, the session, link and API code, buffers of weights in transit. Measured
 * (Linux x64, run from source with tsx; ring.memory.process.test.ts): a one-stage process of the
 * 260K-parameter test model 60-85 MiB, `kiwi join` members 110-125 MiB, `kiwi host` 145-165 MiB
 * over its layers (V8's heap grows by when it collects, so runs differ by some 20 MiB); this is
 * above all of them with room for that spread.
 */
export const RUNTIME_BASELINE_BYTES = 192 * 2 ** 20;

/**
 * What the host's process holds beyond a member's runtime: the API server, its tokenizer worker,
 * prompts, responses and the prompt cache's bookkeeping, and the garbage of them that V8 frees
 * only at its next collection (an ArrayBuffer is returned lazily). Measured in ring.memory.process.test.ts:
 * 35-40 MiB more than a member on a quiet machine, and up to 88 MiB over its admitted memory on
 * two cores loaded by other tests; planned for the host's stage when its memory figure covers the
 * whole process (DeviceSpec.servesApi).
 */
export const HOST_API_BYTES = 96 * 2 ** 20;

/**
 * A whole-process memory budget in MiB (`kiwi join --memory-mb`, the app's join form), refused at
 * once when the runtime alone would not fit; one that fits the runtime but not one layer of the
 * host's model is refused by the host (MEMORY_BUDGET_TOO_SMALL, with the figure it needs).
 */
export function memoryBudgetBytes(mb: number, what: string): number {
  if (!Number.isSafeInteger(mb) || mb < 1 || mb > 2 ** 30) throw new KiwiError('USAGE', `${what} must be a whole number of MiB from 1 to ${2 ** 30}, got ${mb}`);
  if (mb * 2 ** 20 < RUNTIME_BASELINE_BYTES) {
    throw new KiwiError('USAGE', `${what} ${mb} cannot hold a member: its runtime alone needs ${RUNTIME_BASELINE_BYTES / 2 ** 20} MiB, and each layer its weights and KV cache on top`);
  }
  return mb * 2 ** 20;
}

/**
 * The planner's sizes from a GGUF's summary. The largest block stands for every block, so that
 * admission errs on the side of memory when quantization mixes differ between blocks. The head
 * reads the output projection (the embedding matrix when tied) and final norm per token, and keeps
 * the embedding and output projection resident (tied: once in the file).
 */
export function modelSizesFromSummary(s: ModelSummary): ModelSizes {
  const head = s.head_bytes;
  const projection = s.tied_embeddings || head.output === 0 ? head.embedding : head.output;
  return {
    name: s.name ?? s.architecture,
    layers: s.block_count,
    blockBytes: s.bytes_per_block.max,
    headBytes: projection + head.output_norm,
    headResidentBytes: head.embedding + head.output + head.output_norm,
    // K and V: 2 × kv_heads × head_dim elements per token per block.
    kvBytesPerTokenPerLayer: 2 * s.head_count_kv * s.head_dim * KV_BYTES_PER_ELEMENT,
  };
}

/**
 * The planner's sizes with memory as the runtime keeps it: each block's matrices in onnxruntime's
 * packed form (Q4_0: 6 bits a weight, not 4.5; Q8_0: 10; Q6_K: 12; Q4_K: 6.1), the head's
 * embedding as GGUF bytes (kept in JS for the lookup) plus its output projection packed (a tied
 * projection is a second, packed copy of the embedding), and a stage process's own baseline and
 * scratch. bytes read per token (blockBytes, headBytes) stay the file's.
 */
export function modelSizesFromGguf(file: GgufFile): ModelSizes {
  const s = summarizeModel(file);
  const sizes = modelSizesFromSummary(s);
  const perBlock = new Array<number>(s.block_count).fill(0);
  // What the head reads per token (its packed projection and norm) and what it keeps besides.
  let headRead = 0;
  for (const t of file.tensors) {
    const blk = /^blk\.(\d+)\./.exec(t.name);
    if (blk !== null && Number(blk[1]) < s.block_count) perBlock[Number(blk[1])]! += tensorResidentBytes(t);
    else if (t.name === 'output.weight' || t.name.startsWith('output_norm.')) headRead += tensorResidentBytes(t);
  }
  const embedding = file.tensor('token_embd.weight');
  if (embedding !== undefined && file.tensor('output.weight') === undefined) headRead += tensorResidentBytes(embedding);
  const head = headRead + (embedding?.byteLength ?? 0);
  const scratch = { hidden: s.embedding_length, ffn: s.feed_forward_length, heads: s.head_count, vocab: s.vocab_size };
  return {
    ...sizes,
    blockResidentBytes: Math.max(1, ...perBlock),
    headResidentBytes: head,
    headReadBytes: headRead,
    stageOverheadBytes: RUNTIME_BASELINE_BYTES + scratchBytes(scratch, true),
    scratchBytesPerPosition: scratchBytesPerPosition(scratch),
    keptRowBytesPerPosition: keptRowBytes(s.embedding_length),
  };
}
