// The token embedding of the first stage: the GGUF bytes of token_embd.weight kept as they are
// (Q4_0 stays ~4.5 bits a weight) and only the looked-up rows dequantized, exactly as ggml does.
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { openTensorReader } from '../model/gguf/gguf-reader.js';
import { ggmlTypeName, tensorByteLength } from '../model/gguf/gguf-types.js';
import type { GgmlType } from '../model/gguf/gguf-types.js';
import { DEQUANTIZABLE_TYPES, dequantize } from '../model/gguf/dequantize.js';

export class EmbeddingTable {
  private readonly rowBytes: number;

  constructor(
    readonly type: GgmlType,
    readonly vocab: number,
    readonly hidden: number,
    /** [vocab] rows of `hidden` elements in GGUF encoding. */
    private readonly bytes: Uint8Array,
  ) {
    if (!DEQUANTIZABLE_TYPES.includes(type)) {
      throw new KiwiError('MODEL_UNSUPPORTED', `token_embd.weight has type ${ggmlTypeName(type)}, which Kiwi cannot decode`);
    }
    this.rowBytes = tensorByteLength(type, [hidden]);
    if (bytes.byteLength !== this.rowBytes * vocab) throw new KiwiError('GGUF_INVALID', 'token_embd.weight has the wrong byte length');
  }

  static async fromGguf(file: GgufFile, vocab: number, hidden: number): Promise<EmbeddingTable> {
    const t = file.tensor('token_embd.weight');
    if (t === undefined || t.dims[0] !== hidden || t.dims[1] !== vocab) {
      throw new KiwiError('MODEL_UNSUPPORTED', `token_embd.weight is missing or not [${hidden}, ${vocab}]`);
    }
    const reader = await openTensorReader(file);
    try {
      return new EmbeddingTable(t.type, vocab, hidden, await reader.read(t));
    } finally {
      await reader.close();
    }
  }

  /** [ids.length, hidden] f32. */
  lookup(ids: ArrayLike<number | bigint>): Float32Array {
    const out = new Float32Array(ids.length * this.hidden);
    for (let i = 0; i < ids.length; i++) {
      const id = Number(ids[i]);
      if (!Number.isInteger(id) || id < 0 || id >= this.vocab) {
        throw new KiwiError('TOKEN_INVALID', `token id ${id} is outside the vocabulary of ${this.vocab}`);
      }
      const row = this.bytes.subarray(id * this.rowBytes, (id + 1) * this.rowBytes);
      out.set(dequantize(this.type, row, this.hidden), i * this.hidden);
    }
    return out;
  }
}
