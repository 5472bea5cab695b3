// GGML tensor types as numbered by the GGUF spec (ggml/docs/gguf.md, ggml.h `enum ggml_type`) and
// their block layouts (ggml-common.h). Invariant: a type is only "known" here if its block size
// and byte size are exact; removed ids (4, 5, 31-33, 36-38) are refused as unsupported.
import { KiwiError } from '../../errors.js';

export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4 (Q4_2) and 5 (Q4_3) were removed from ggml.
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  // 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed: they are repacked at load time now.
  TQ1_0 = 34,
  TQ2_0 = 35,
  // 36-38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed likewise.
  MXFP4 = 39,
}

// Typed arrays are backed by their own ArrayBuffer (copied out of the file), never a shared one.
export type GgufValue =
  | number
  | bigint
  | boolean
  | string
  | GgufValue[]
  | Uint8Array<ArrayBuffer>
  | Int8Array<ArrayBuffer>
  | Uint16Array<ArrayBuffer>
  | Int16Array<ArrayBuffer>
  | Uint32Array<ArrayBuffer>
  | Int32Array<ArrayBuffer>
  | Float32Array<ArrayBuffer>
  | Float64Array<ArrayBuffer>
  | BigUint64Array<ArrayBuffer>
  | BigInt64Array<ArrayBuffer>;

/** GGUF metadata value type ids (gguf.md `gguf_metadata_value_type`). */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

export interface GgmlTypeInfo {
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
}

const QK_K = 256;

// [name, elements per block, bytes per block], from the block structs of ggml-common.h.
const TYPE_TABLE: ReadonlyMap<number, readonly [string, number, number]> = new Map([
  [GgmlType.F32, ['F32', 1, 4]],
  [GgmlType.F16, ['F16', 1, 2]],
  [GgmlType.Q4_0, ['Q4_0', 32, 2 + 16]],
  [GgmlType.Q4_1, ['Q4_1', 32, 2 + 2 + 16]],
  [GgmlType.Q5_0, ['Q5_0', 32, 2 + 4 + 16]],
  [GgmlType.Q5_1, ['Q5_1', 32, 2 + 2 + 4 + 16]],
  [GgmlType.Q8_0, ['Q8_0', 32, 2 + 32]],
  [GgmlType.Q8_1, ['Q8_1', 32, 2 + 2 + 32]],
  [GgmlType.Q2_K, ['Q2_K', QK_K, 2 + 2 + QK_K / 16 + QK_K / 4]],
  [GgmlType.Q3_K, ['Q3_K', QK_K, 2 + QK_K / 4 + QK_K / 8 + 12]],
  [GgmlType.Q4_K, ['Q4_K', QK_K, 2 + 2 + 12 + QK_K / 2]],
  [GgmlType.Q5_K, ['Q5_K', QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2]],
  [GgmlType.Q6_K, ['Q6_K', QK_K, 2 + QK_K / 16 + (3 * QK_K) / 4]],
  [GgmlType.Q8_K, ['Q8_K', QK_K, 4 + QK_K + (QK_K / 16) * 2]],
  [GgmlType.IQ2_XXS, ['IQ2_XXS', QK_K, 2 + (QK_K / 8) * 2]],
  [GgmlType.IQ2_XS, ['IQ2_XS', QK_K, 2 + (QK_K / 8) * 2 + QK_K / 32]],
  [GgmlType.IQ3_XXS, ['IQ3_XXS', QK_K, 2 + (3 * QK_K) / 8]],
  [GgmlType.IQ1_S, ['IQ1_S', QK_K, 2 + QK_K / 8 + QK_K / 16]],
  [GgmlType.IQ4_NL, ['IQ4_NL', 32, 2 + 16]],
  [GgmlType.IQ3_S, ['IQ3_S', QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64]],
  [GgmlType.IQ2_S, ['IQ2_S', QK_K, 2 + QK_K / 4 + QK_K / 16]],
  [GgmlType.IQ4_XS, ['IQ4_XS', QK_K, 2 + 2 + QK_K / 64 + QK_K / 2]],
  [GgmlType.I8, ['I8', 1, 1]],
  [GgmlType.I16, ['I16', 1, 2]],
  [GgmlType.I32, ['I32', 1, 4]],
  [GgmlType.I64, ['I64', 1, 8]],
  [GgmlType.F64, ['F64', 1, 8]],
  [GgmlType.IQ1_M, ['IQ1_M', QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32]],
  [GgmlType.BF16, ['BF16', 1, 2]],
  [GgmlType.TQ1_0, ['TQ1_0', QK_K, (QK_K - (4 * QK_K) / 64) / 5 + QK_K / 64 + 2]],
  [GgmlType.TQ2_0, ['TQ2_0', QK_K, QK_K / 4 + 2]],
  [GgmlType.MXFP4, ['MXFP4', 32, 1 + 16]],
]);

const REMOVED_TYPES: ReadonlyMap<number, string> = new Map([
  [4, 'Q4_2'],
  [5, 'Q4_3'],
  [31, 'Q4_0_4_4'],
  [32, 'Q4_0_4_8'],
  [33, 'Q4_0_8_8'],
  [36, 'IQ4_NL_4_4'],
  [37, 'IQ4_NL_4_8'],
  [38, 'IQ4_NL_8_8'],
]);

export function isKnownGgmlType(t: number): t is GgmlType {
  return TYPE_TABLE.has(t);
}

export function ggmlTypeName(t: GgmlType): string {
  return TYPE_TABLE.get(t)?.[0] ?? REMOVED_TYPES.get(t) ?? `type#${String(t)}`;
}

/** Parses a type name such as 'q4_k' or 'Q4_K' (case-insensitive); undefined if unknown. */
export function ggmlTypeFromName(name: string): GgmlType | undefined {
  const upper = name.toUpperCase();
  for (const [id, [n]] of TYPE_TABLE) if (n === upper) return id as GgmlType;
  return undefined;
}

export function ggmlTypeInfo(t: GgmlType): GgmlTypeInfo {
  const entry = TYPE_TABLE.get(t);
  if (entry === undefined) {
    const removed = REMOVED_TYPES.get(t);
    throw new KiwiError(
      'GGUF_UNSUPPORTED',
      removed !== undefined
        ? `ggml type ${String(t)} (${removed}) was removed from ggml; re-convert the model with a current llama.cpp`
        : `unknown ggml tensor type ${String(t)}; the file may be newer than Kiwi or corrupt`,
      { type: t },
    );
  }
  return { blockSize: entry[1], typeSize: entry[2] };
}

/**
 * Bytes of a tensor of `type` with shape `dims` (ne[0] first). ggml requires ne[0] to be a whole
 * number of blocks; every dimension a non-negative safe integer and the total a safe integer.
 */
export function tensorByteLength(type: GgmlType, dims: readonly number[]): number {
  const { blockSize, typeSize } = ggmlTypeInfo(type);
  if (dims.length > 4) {
    throw new KiwiError('GGUF_INVALID', `tensor has ${String(dims.length)} dimensions; ggml allows at most 4`);
  }
  let rows = 1;
  for (let i = 0; i < dims.length; i++) {
    const d = dims[i]!;
    if (!Number.isSafeInteger(d) || d < 0) {
      throw new KiwiError('GGUF_INVALID', `tensor dimension ${String(i)} is ${String(d)}; it must be a non-negative integer`);
    }
    if (i > 0) rows *= d;
  }
  const ne0 = dims.length > 0 ? dims[0]! : 1;
  if (ne0 % blockSize !== 0) {
    throw new KiwiError(
      'GGUF_INVALID',
      `tensor of type ${ggmlTypeName(type)} has ne[0] = ${String(ne0)}, not a multiple of its block size ${String(blockSize)}`,
    );
  }
  const rowBytes = (ne0 / blockSize) * typeSize;
  const total = rowBytes * rows;
  if (!Number.isSafeInteger(total) || !Number.isSafeInteger(rows)) {
    throw new KiwiError('GGUF_INVALID', `tensor shape [${dims.join(', ')}] is too large to address`);
  }
  return total;
}

/** Number of elements of a shape (product of dims; 1 for a scalar). */
export function elementCount(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) n *= d;
  return n;
}
