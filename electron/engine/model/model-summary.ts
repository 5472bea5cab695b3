// What `kiwi inspect` reports about a GGUF model: its config, the tensor types present and where the
// bytes are (per transformer block and in the head). Pure: takes a parsed GgufFile, does no I/O.
import { KiwiError } from '../errors.js';
import type { GgufFile } from './gguf/gguf-reader.js';
import { ggmlTypeName } from './gguf/gguf-types.js';
import { modelConfigFromGguf } from './model-config.js';

export interface ModelSummary {
  file: string;
  gguf_version: number;
  architecture: string;
  name: string | null;
  block_count: number;
  embedding_length: number;
  head_count: number;
  head_count_kv: number;
  head_dim: number;
  feed_forward_length: number;
  vocab_size: number;
  context_length: number;
  rms_eps: number;
  rope: {
    freq_base: number;
    dimension_count: number;
    scaling_type: string;
    scaling_factor: number;
    original_context_length: number | null;
    low_freq_factor: number | null;
    high_freq_factor: number | null;
    freq_factors_tensor: string | null;
  };
  tied_embeddings: boolean;
  qkv_bias: boolean;
  qk_norm: boolean;
  tensor_count: number;
  /** ggml type name -> number of tensors of that type. */
  tensor_types: Record<string, number>;
  /** Size of the file (of all its files, for a split model). */
  total_bytes: number;
  /** Number of files (1 unless the model is split). */
  file_count: number;
  /** Sum of all tensors' data. */
  tensor_bytes: number;
  /** Tensor data of each block blk.0 .. blk.(n-1), with their max, min and mean. */
  bytes_per_block: { max: number; min: number; mean: number; per_block: number[] };
  /** The head: the embedding (held where the ring starts) and final norm + output projection. */
  head_bytes: { embedding: number; output_norm: number; output: number; total: number };
  /** Tensors that belong to neither a block nor the head (e.g. rope_freqs.weight). */
  other_bytes: number;
}

const BLOCK_TENSOR = /^blk\.(\d+)\./;

export function summarizeModel(file: GgufFile): ModelSummary {
  if (file.tensors.length === 0) {
    throw new KiwiError('MODEL_UNSUPPORTED', `${file.path || 'this GGUF'} has no tensors: it is a vocabulary-only file, not a model`);
  }
  const c = modelConfigFromGguf(file, { anyArchitecture: true });
  const types: Record<string, number> = {};
  const perBlock = new Array<number>(c.blockCount).fill(0);
  let tensorBytes = 0;
  let other = 0;
  const head = { embedding: 0, output_norm: 0, output: 0, total: 0 };
  for (const t of file.tensors) {
    const name = ggmlTypeName(t.type);
    types[name] = (types[name] ?? 0) + 1;
    tensorBytes += t.byteLength;
    const blk = BLOCK_TENSOR.exec(t.name);
    if (blk !== null && Number(blk[1]) < c.blockCount) {
      perBlock[Number(blk[1])]! += t.byteLength;
    } else if (t.name === 'token_embd.weight') {
      head.embedding += t.byteLength;
    } else if (t.name.startsWith('output_norm.')) {
      head.output_norm += t.byteLength;
    } else if (t.name.startsWith('output.')) {
      head.output += t.byteLength;
    } else {
      other += t.byteLength;
    }
  }
  head.total = head.embedding + head.output_norm + head.output;
  const blockTotal = perBlock.reduce((a, b) => a + b, 0);
  return {
    file: file.path,
    gguf_version: file.version,
    architecture: c.architecture,
    name: c.name ?? null,
    block_count: c.blockCount,
    embedding_length: c.embeddingLength,
    head_count: c.headCount,
    head_count_kv: c.headCountKv,
    head_dim: c.headDim,
    feed_forward_length: c.feedForwardLength,
    vocab_size: c.vocabSize,
    context_length: c.contextLength,
    rms_eps: c.rmsEps,
    rope: {
      freq_base: c.rope.freqBase,
      dimension_count: c.rope.dimensionCount,
      scaling_type: c.rope.scalingType,
      scaling_factor: c.rope.scalingFactor,
      original_context_length: c.rope.originalContextLength ?? null,
      low_freq_factor: c.rope.lowFreqFactor ?? null,
      high_freq_factor: c.rope.highFreqFactor ?? null,
      freq_factors_tensor: c.rope.freqFactorsTensor ?? null,
    },
    tied_embeddings: c.tiedEmbeddings,
    qkv_bias: c.qkvBias,
    qk_norm: c.qkNorm,
    tensor_count: file.tensors.length,
    tensor_types: types,
    total_bytes: file.splits?.reduce((a, f) => a + f.fileSize, 0) ?? file.fileSize,
    file_count: file.splits?.length ?? 1,
    tensor_bytes: tensorBytes,
    bytes_per_block: {
      max: perBlock.length > 0 ? Math.max(...perBlock) : 0,
      min: perBlock.length > 0 ? Math.min(...perBlock) : 0,
      mean: perBlock.length > 0 ? blockTotal / perBlock.length : 0,
      per_block: perBlock,
    },
    head_bytes: head,
    other_bytes: other,
  };
}

function mib(n: number): string {
  return n >= 1024 * 1024 ? `${(n / (1024 * 1024)).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
}

/** The human-readable table `kiwi inspect` prints without --json. */
export function formatModelSummary(s: ModelSummary): string {
  const rows: Array<[string, string]> = [
    ['file', s.file],
    ['architecture', `${s.architecture}${s.name !== null ? ` (${s.name})` : ''}, GGUF v${String(s.gguf_version)}`],
    ['blocks', String(s.block_count)],
    ['embedding length', String(s.embedding_length)],
    ['heads / KV heads', `${String(s.head_count)} / ${String(s.head_count_kv)} (head dim ${String(s.head_dim)})`],
    ['feed-forward length', String(s.feed_forward_length)],
    ['vocab size', String(s.vocab_size)],
    ['context length', String(s.context_length)],
    ['RMS eps', String(s.rms_eps)],
    [
      'rope',
      `base ${String(s.rope.freq_base)}, ${String(s.rope.dimension_count)} dims, scaling ${s.rope.scaling_type}` +
        (s.rope.scaling_factor !== 1 ? ` x${String(s.rope.scaling_factor)}` : '') +
        (s.rope.freq_factors_tensor !== null ? `, freq factors in ${s.rope.freq_factors_tensor}` : ''),
    ],
    ['features', [s.tied_embeddings ? 'tied embeddings' : 'separate output', s.qkv_bias ? 'qkv bias' : null, s.qk_norm ? 'q/k norm' : null].filter((x) => x !== null).join(', ')],
    ['tensors', `${String(s.tensor_count)}: ${Object.entries(s.tensor_types).map(([t, n]) => `${t} x${String(n)}`).join(', ')}`],
    ['total size', `${mib(s.total_bytes)} (${String(s.total_bytes)} bytes${s.file_count > 1 ? ` in ${String(s.file_count)} files` : ''})`],
    ['tensor data', mib(s.tensor_bytes)],
    ['per block', `max ${mib(s.bytes_per_block.max)}, min ${mib(s.bytes_per_block.min)}, mean ${mib(s.bytes_per_block.mean)}`],
    ['head', `embedding ${mib(s.head_bytes.embedding)}, output norm ${mib(s.head_bytes.output_norm)}, output ${mib(s.head_bytes.output)}`],
  ];
  if (s.other_bytes > 0) rows.push(['other tensors', mib(s.other_bytes)]);
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n') + '\n';
}
