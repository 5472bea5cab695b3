// The model as the planner sizes it, from a GGUF's summary: per-block and head bytes and KV bytes
// per token (used by `kiwi plan`, `kiwi host` and the UI's hosting alike).
import type { ModelSummary } from '../model/model-summary.js';
import type { ModelSizes } from './fleet.js';

/** The runtime keeps K and V in fp16: 2 bytes per element. */
export const KV_BYTES_PER_ELEMENT = 2;

/**
 * The planner's sizes from a GGUF's summary. The largest block stands for every block, so that
 * admission errs on the side of memory when quantization mixes differ between blocks. The head
 * reads the output projection (the embedding matrix when tied) and final norm per token, and keeps
 * the embedding and output projection resident (tied: once).
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
