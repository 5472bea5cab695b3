// Activation frames: a safetensors-compatible container (8-byte little-endian header length, a
// JSON header {name: {dtype, shape, data_offsets}, __metadata__: {string: string}}, raw tensor
// bytes; https://huggingface.co/docs/safetensors) for the hidden states or token ids one ring
// step carries, with the step's request ids and positions in __metadata__. Hidden states travel
// as F32, F16 or I8 with a per-row F32 scale; the whole container may be zstd-compressed.
// Pure apart from zstd (compression.ts). Every size and shape is checked before allocating, and a
// receiver refuses encodings its link did not agree on.
//
//   wire: flags u8 (bit 0: zstd) | safetensors bytes
//     or: flags u8 = 1 | u32 LE size of the safetensors bytes | one zstd frame holding them
// The declared size is checked against the receiver's limit (what its shape allows) before a byte
// is decompressed or allocated.
import { KiwiError } from '../errors.js';
import { f16Table32, f32ToF16Bits } from '../model/gguf/quant/half.js';
import { zstdCompress, zstdDecompress } from './compression.js';

export type Dtype = 'F32' | 'F16' | 'I8' | 'I64';
const DTYPE_BYTES: Record<Dtype, number> = { F32: 4, F16: 2, I8: 1, I64: 8 };

export interface RawTensor {
  dtype: Dtype;
  shape: number[];
  /** Little-endian element bytes, exactly product(shape) × dtype size. */
  data: Uint8Array;
}

export interface SafetensorsLimits {
  maxHeaderBytes: number;
  maxTensors: number;
  maxRank: number;
}

export const DEFAULT_SAFETENSORS_LIMITS: SafetensorsLimits = { maxHeaderBytes: 64 * 1024, maxTensors: 16, maxRank: 4 };

/** Encodes tensors in the given order; the header is padded with spaces to 8 bytes (as the spec recommends). */
export function encodeSafetensors(tensors: ReadonlyMap<string, RawTensor>, metadata: Readonly<Record<string, string>>): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of tensors) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    if (bytes !== t.data.length) throw new Error(`tensor ${name}: ${t.data.length} bytes for shape [${t.shape.join(',')}] ${t.dtype}`);
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const head = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const t of tensors.values()) {
    out.set(t.data, at);
    at += t.data.length;
  }
  return out;
}

export interface Safetensors {
  tensors: Map<string, RawTensor>;
  metadata: Record<string, string>;
}

const invalid = (message: string): KiwiError => new KiwiError('TENSOR_FRAME_INVALID', `Malformed tensor frame: ${message}.`);

/** Decodes a safetensors buffer; tensor data are views into `bytes`. */
export function decodeSafetensors(bytes: Uint8Array, limits: SafetensorsLimits = DEFAULT_SAFETENSORS_LIMITS): Safetensors {
  if (bytes.length < 8) throw invalid(`${bytes.length} bytes cannot hold the 8-byte header length`);
  const headerBytes = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(0, true);
  if (headerBytes > BigInt(limits.maxHeaderBytes)) {
    throw new KiwiError('FRAME_TOO_LARGE', `A tensor frame header of ${headerBytes} bytes exceeds the limit of ${limits.maxHeaderBytes}.`);
  }
  const headerLength = Number(headerBytes);
  if (8 + headerLength > bytes.length) throw invalid(`the header claims ${headerLength} bytes but only ${bytes.length - 8} follow`);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + headerLength)));
  } catch {
    throw invalid('the header is not UTF-8 JSON');
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw invalid('the header is not a JSON object');
  const dataStart = 8 + headerLength;
  const dataBytes = bytes.length - dataStart;
  const metadata: Record<string, string> = {};
  const spans: Array<[number, number, string]> = [];
  const tensors = new Map<string, RawTensor>();
  for (const [name, value] of Object.entries(header)) {
    if (name === '__metadata__') {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid('__metadata__ is not an object');
      for (const [k, v] of Object.entries(value)) {
        if (typeof v !== 'string') throw invalid(`metadata '${k}' is not a string`);
        metadata[k] = v;
      }
      continue;
    }
    if (tensors.size >= limits.maxTensors) throw invalid(`more than ${limits.maxTensors} tensors`);
    if (typeof value !== 'object' || value === null) throw invalid(`tensor '${name}' is not an object`);
    const { dtype, shape, data_offsets: offsets } = value as Record<string, unknown>;
    if (typeof dtype !== 'string' || !(dtype in DTYPE_BYTES)) throw invalid(`tensor '${name}' has unsupported dtype ${String(dtype)}`);
    if (!Array.isArray(shape) || shape.length > limits.maxRank || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw invalid(`tensor '${name}' has a bad shape`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      throw invalid(`tensor '${name}' has bad data_offsets`);
    }
    const [begin, end] = offsets as [number, number];
    if (begin > end || end > dataBytes) throw invalid(`tensor '${name}' spans [${begin}, ${end}) outside the ${dataBytes} data bytes`);
    // Checked against the bytes that arrived, so the product below cannot allocate anything.
    let elements = 1;
    for (const d of shape as number[]) elements *= d;
    if (elements * DTYPE_BYTES[dtype as Dtype] !== end - begin) throw invalid(`tensor '${name}' has ${end - begin} bytes for shape [${shape.join(', ')}] ${dtype}`);
    spans.push([begin, end, name]);
    tensors.set(name, { dtype: dtype as Dtype, shape: shape as number[], data: bytes.subarray(dataStart + begin, dataStart + end) });
  }
  // The spec: tensors fill the data section without holes or overlap.
  spans.sort((a, b) => a[0] - b[0]);
  let next = 0;
  for (const [begin, end, name] of spans) {
    if (begin !== next) throw invalid(`tensor '${name}' starts at ${begin}, expected ${next} (holes or overlap)`);
    next = end;
  }
  if (next !== dataBytes) throw invalid(`${dataBytes - next} bytes after the last tensor`);
  return { tensors, metadata };
}

// ---- activations ----

export type ActivationEncoding = 'f32' | 'f16' | 'int8';
export const ACTIVATION_ENCODINGS: readonly ActivationEncoding[] = ['f32', 'f16', 'int8'];

export interface WireOptions {
  encoding: ActivationEncoding;
  zstd: boolean;
}

/** One ring step's payload: token ids [batch, seq] for a stage that embeds, or hidden states [batch, seq, hidden]. */
export type StepTensor = { kind: 'ids'; ids: BigInt64Array; dims: [number, number] } | { kind: 'hidden'; hidden: Float32Array; dims: [number, number, number] };

export interface StepFrame {
  /** Strings only (safetensors metadata); the pipeline validates their meaning. */
  metadata: Record<string, string>;
  tensor: StepTensor;
}

export interface StepFrameLimits {
  /** Largest decoded (uncompressed) frame: maxStepFrameBytes() of the receiver's shape. */
  maxBytes: number;
  /** The hidden size hidden states must have; undefined: any. */
  hidden?: number;
  /**
   * What the link agreed to carry: token ids (into a stage that embeds) or hidden states in one
   * encoding, zstd or not. Anything else is refused (WIRE_NOT_AGREED). Undefined: any (tools, benches).
   */
  expect?: { tensor: 'ids' | ActivationEncoding; zstd: boolean };
}

const FLAG_ZSTD = 1;
/** Room for a step frame's safetensors header (the limit decodeSafetensors enforces). */
const MAX_HEADER_BYTES = DEFAULT_SAFETENSORS_LIMITS.maxHeaderBytes + 8;

/**
 * The largest decoded step frame a stage can legitimately receive: a prefill of `maxSeq` tokens
 * or a decode step of `maxRows` requests (never both: a batched step adds one token per row), in
 * `tensor`'s bytes per element, plus the header.
 */
export function maxStepFrameBytes(shape: { hidden: number; maxRows: number; maxSeq: number }, tensor: 'ids' | ActivationEncoding): number {
  const tokens = Math.max(shape.maxRows, shape.maxSeq);
  const rows = shape.maxRows;
  const body = tensor === 'ids' ? tokens * 8 : tensor === 'f32' ? tokens * shape.hidden * 4 : tensor === 'f16' ? tokens * shape.hidden * 2 : tokens * shape.hidden + 4 * Math.max(rows, tokens);
  return MAX_HEADER_BYTES + body;
}

/** Index of the first NaN or infinite element, or -1 when every one is finite. */
export function firstNonFinite(x: Float32Array): number {
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i]!)) return i;
  return -1;
}

const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

export async function encodeStepFrame(frame: StepFrame, opts: WireOptions): Promise<Uint8Array> {
  const tensors = new Map<string, RawTensor>();
  const t = frame.tensor;
  const metadata = { ...frame.metadata, encoding: t.kind === 'ids' ? 'ids' : opts.encoding };
  if (t.kind === 'ids') {
    tensors.set('ids', { dtype: 'I64', shape: [...t.dims], data: bytesOf(t.ids) });
  } else if (opts.encoding === 'f32') {
    tensors.set('hidden', { dtype: 'F32', shape: [...t.dims], data: bytesOf(t.hidden) });
  } else if (opts.encoding === 'f16') {
    const h = new Uint16Array(t.hidden.length);
    for (let i = 0; i < h.length; i++) h[i] = f32ToF16Bits(t.hidden[i]!);
    tensors.set('hidden', { dtype: 'F16', shape: [...t.dims], data: bytesOf(h) });
  } else {
    const { q, scales } = quantizeRows(t.hidden, t.dims[2]);
    tensors.set('hidden', { dtype: 'I8', shape: [...t.dims], data: bytesOf(q) });
    tensors.set('hidden.scale', { dtype: 'F32', shape: [t.dims[0], t.dims[1]], data: bytesOf(scales) });
  }
  const body = encodeSafetensors(tensors, metadata);
  if (!opts.zstd) {
    const out = new Uint8Array(1 + body.length);
    out.set(body, 1);
    return out;
  }
  const packed = await zstdCompress(body);
  const out = new Uint8Array(5 + packed.length);
  out[0] = FLAG_ZSTD;
  new DataView(out.buffer).setUint32(1, body.length, true);
  out.set(packed, 5);
  return out;
}

const notAgreed = (what: string): KiwiError => new KiwiError('WIRE_NOT_AGREED', `A tensor frame ${what}, which this link did not agree on.`);

export async function decodeStepFrame(bytes: Uint8Array, limits: StepFrameLimits): Promise<StepFrame> {
  if (bytes.length < 1) throw invalid('an empty frame');
  const flags = bytes[0]!;
  if ((flags & ~FLAG_ZSTD) !== 0) throw invalid(`unknown flags 0x${flags.toString(16)}`);
  const zstd = (flags & FLAG_ZSTD) !== 0;
  if (limits.expect !== undefined && zstd !== limits.expect.zstd) throw notAgreed(zstd ? 'is zstd-compressed' : 'is not compressed');
  let body: Uint8Array;
  if (zstd) {
    if (bytes.length < 5) throw invalid('a compressed frame without its size');
    const declared = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(1, true);
    if (declared > limits.maxBytes) {
      throw new KiwiError('FRAME_TOO_LARGE', `A compressed tensor frame declares ${declared} bytes, more than the ${limits.maxBytes} this stage can receive.`, { size: declared, maxBytes: limits.maxBytes });
    }
    body = await zstdDecompress(bytes.subarray(5), declared);
  } else {
    body = bytes.subarray(1);
    if (body.length > limits.maxBytes) throw new KiwiError('FRAME_TOO_LARGE', `A tensor frame of ${body.length} bytes exceeds the limit of ${limits.maxBytes}.`, { size: body.length, maxBytes: limits.maxBytes });
  }
  const { tensors, metadata } = decodeSafetensors(body);
  const encoding = metadata.encoding;
  if (limits.expect !== undefined && encoding !== limits.expect.tensor) throw notAgreed(`carries ${encoding === 'ids' ? 'token ids' : `'${String(encoding)}' activations`}`);
  const expect = (name: string, dtype: Dtype, rank: number): RawTensor => {
    const t = tensors.get(name);
    if (t === undefined || t.dtype !== dtype || t.shape.length !== rank) throw invalid(`'${name}' must be a rank-${rank} ${dtype} tensor for encoding ${encoding}`);
    return t;
  };
  const names = encoding === 'int8' ? ['hidden', 'hidden.scale'] : [encoding === 'ids' ? 'ids' : 'hidden'];
  if (tensors.size !== names.length || !names.every((n) => tensors.has(n))) throw invalid(`encoding '${encoding}' needs exactly the tensors ${names.join(', ')}`);
  if (encoding === 'ids') {
    const t = expect('ids', 'I64', 2);
    if (t.shape[0] === 0 || t.shape[1] === 0) throw invalid('a step of no tokens');
    return { metadata, tensor: { kind: 'ids', ids: new BigInt64Array(copyOut(t.data)), dims: t.shape as [number, number] } };
  }
  const dtype: Dtype | undefined = encoding === 'f32' ? 'F32' : encoding === 'f16' ? 'F16' : encoding === 'int8' ? 'I8' : undefined;
  if (dtype === undefined) throw invalid(`unknown encoding '${String(encoding)}'`);
  const t = expect('hidden', dtype, 3);
  const dims = t.shape as [number, number, number];
  if (dims[0] === 0 || dims[1] === 0) throw invalid('a step of no tokens');
  if (limits.hidden !== undefined && dims[2] !== limits.hidden) throw invalid(`hidden states of width ${dims[2]}, this model's is ${limits.hidden}`);
  let hidden: Float32Array;
  if (dtype === 'F32') {
    hidden = new Float32Array(copyOut(t.data));
  } else if (dtype === 'F16') {
    const table = f16Table32();
    const h = new Uint16Array(copyOut(t.data));
    hidden = new Float32Array(h.length);
    for (let i = 0; i < h.length; i++) hidden[i] = table[h[i]!]!;
  } else {
    const s = expect('hidden.scale', 'F32', 2);
    if (s.shape[0] !== dims[0] || s.shape[1] !== dims[1]) throw invalid('hidden.scale must be [batch, seq] of hidden');
    hidden = dequantizeRows(new Int8Array(t.data.buffer, t.data.byteOffset, t.data.length), new Float32Array(copyOut(s.data)), dims[2]);
  }
  return { metadata, tensor: { kind: 'hidden', hidden, dims } };
}

/** A fresh (so aligned) ArrayBuffer holding `data`: typed views need alignment, and the copy detaches the result from the network buffer. */
function copyOut(data: Uint8Array): ArrayBuffer {
  const copy = new Uint8Array(data.length);
  copy.set(data);
  return copy.buffer;
}

/** Symmetric int8 per row of `width`: q = round(x / scale), scale = max|x| / 127 (0 rows: scale 0). */
export function quantizeRows(x: Float32Array, width: number): { q: Int8Array; scales: Float32Array } {
  const rows = x.length / width;
  const q = new Int8Array(x.length);
  const scales = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let max = 0;
    for (let i = r * width; i < (r + 1) * width; i++) max = Math.max(max, Math.abs(x[i]!));
    const scale = max / 127;
    scales[r] = scale;
    if (scale === 0 || !Number.isFinite(scale)) continue;
    for (let i = r * width; i < (r + 1) * width; i++) q[i] = Math.max(-127, Math.min(127, Math.round(x[i]! / scale)));
  }
  return { q, scales };
}

export function dequantizeRows(q: Int8Array, scales: Float32Array, width: number): Float32Array {
  const out = new Float32Array(q.length);
  for (let r = 0; r < scales.length; r++) {
    const s = scales[r]!;
    for (let i = r * width; i < (r + 1) * width; i++) out[i] = q[i]! * s;
  }
  return out;
}
