// Typed access to GGUF metadata: each accessor returns the value in the expected JS type or throws
// KiwiError('GGUF_INVALID') naming the key and what it holds instead. `require*` variants also throw
// when the key is missing.
import { KiwiError } from '../../errors.js';
import type { GgufValue } from './gguf-types.js';

export type GgufMetadata = ReadonlyMap<string, GgufValue>;

function describe(v: GgufValue): string {
  if (Array.isArray(v)) return `an array of ${String(v.length)}`;
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} of ${String(v.length)}`;
  if (typeof v === 'string') return `a string`;
  return `a ${typeof v} (${String(v)})`;
}

function wrongType(key: string, expected: string, v: GgufValue): KiwiError {
  return new KiwiError('GGUF_INVALID', `metadata key '${key}' must be ${expected}, but it is ${describe(v)}`, { key });
}

function missing(key: string): KiwiError {
  return new KiwiError('GGUF_INVALID', `metadata key '${key}' is missing; the model file is incomplete or not of the expected kind`, {
    key,
  });
}

export function metaString(meta: GgufMetadata, key: string): string | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw wrongType(key, 'a string', v);
  return v;
}

/** Any numeric scalar (u8..u64, i8..i64, f32, f64); 64-bit integers must be safe integers. */
export function metaNumber(meta: GgufMetadata, key: string): number | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== 'number') throw wrongType(key, 'a number', v);
  return v;
}

/** A numeric scalar that is an integer. */
export function metaInteger(meta: GgufMetadata, key: string): number | undefined {
  const v = metaNumber(meta, key);
  if (v !== undefined && !Number.isSafeInteger(v)) {
    throw new KiwiError('GGUF_INVALID', `metadata key '${key}' must be an integer, but it is ${String(v)}`, { key });
  }
  return v;
}

export function metaBoolean(meta: GgufMetadata, key: string): boolean | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw wrongType(key, 'a boolean', v);
  return v;
}

export function metaStringArray(meta: GgufMetadata, key: string): string[] | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((e) => typeof e === 'string')) throw wrongType(key, 'an array of strings', v);
  return v as string[];
}

export function metaFloat32Array(meta: GgufMetadata, key: string): Float32Array<ArrayBuffer> | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (!(v instanceof Float32Array)) throw wrongType(key, 'an array of f32', v);
  return v;
}

/** An array of i32 (also accepts u8/i8/u16/i16 and u32 within i32 range, as some converters write them). */
export function metaInt32Array(meta: GgufMetadata, key: string): Int32Array<ArrayBuffer> | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (v instanceof Int32Array) return v;
  if (v instanceof Uint8Array || v instanceof Int8Array || v instanceof Uint16Array || v instanceof Int16Array) {
    return Int32Array.from(v);
  }
  if (v instanceof Uint32Array && v.every((x) => x <= 0x7fffffff)) return new Int32Array(v.buffer, v.byteOffset, v.length);
  throw wrongType(key, 'an array of i32', v);
}

export function requireString(meta: GgufMetadata, key: string): string {
  const v = metaString(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireNumber(meta: GgufMetadata, key: string): number {
  const v = metaNumber(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireInteger(meta: GgufMetadata, key: string): number {
  const v = metaInteger(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireBoolean(meta: GgufMetadata, key: string): boolean {
  const v = metaBoolean(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireStringArray(meta: GgufMetadata, key: string): string[] {
  const v = metaStringArray(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireFloat32Array(meta: GgufMetadata, key: string): Float32Array<ArrayBuffer> {
  const v = metaFloat32Array(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}

export function requireInt32Array(meta: GgufMetadata, key: string): Int32Array<ArrayBuffer> {
  const v = metaInt32Array(meta, key);
  if (v === undefined) throw missing(key);
  return v;
}
