// The binary frame every Kiwi link carries, and a streaming decoder that accepts bytes in chunks of
// any size. Pure (no I/O). Every size is checked before anything is allocated; each protocol
// violation has its own error code, and a decoder that failed once stays failed.
//
//   offset size  field
//   0      1     magic 0x4B ('K')
//   1      1     version (1)
//   2      1     type (FrameType)
//   3      1     flags (bit 0: SEALED, the payload is an AEAD record; other bits must be 0)
//   4      4     payload length, unsigned big-endian
//   8      n     payload
import { KiwiError } from '../errors.js';

export const FRAME_MAGIC = 0x4b;
export const FRAME_VERSION = 1;
export const FRAME_HEADER_BYTES = 8;
/** Default largest payload: room for a 1 MiB activation with headers; links may choose less. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

export const FrameType = {
  /** Application bytes (activations, control JSON inside a sealed record). */
  DATA: 1,
  /** RTT probe; the peer answers PONG with the same payload. */
  PING: 2,
  PONG: 3,
  /** Link handshake: a fresh random nonce per connection. */
  HELLO: 4,
  /** Orderly close, payload: UTF-8 reason. */
  CLOSE: 5,
  /** Protocol error, payload: JSON {code, message}. */
  ERROR: 6,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];
const KNOWN_TYPES = new Set<number>(Object.values(FrameType));

export const FrameFlags = { SEALED: 0x01 } as const;
const KNOWN_FLAGS = FrameFlags.SEALED;

export interface Frame {
  type: FrameType;
  flags: number;
  payload: Uint8Array;
}

export function encodeFrame(frame: Frame, maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES): Uint8Array {
  checkType(frame.type);
  checkFlags(frame.flags);
  checkLength(frame.payload.length, maxPayloadBytes);
  const out = new Uint8Array(FRAME_HEADER_BYTES + frame.payload.length);
  writeHeader(out, frame.type, frame.flags, frame.payload.length);
  out.set(frame.payload, FRAME_HEADER_BYTES);
  return out;
}

/** The 8 header bytes alone (used as AEAD associated data and to build frames without copying). */
export function encodeFrameHeader(type: FrameType, flags: number, payloadBytes: number, maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES): Uint8Array {
  checkType(type);
  checkFlags(flags);
  checkLength(payloadBytes, maxPayloadBytes);
  const out = new Uint8Array(FRAME_HEADER_BYTES);
  writeHeader(out, type, flags, payloadBytes);
  return out;
}

/** Decodes exactly one frame that fills `bytes` (a whole message of a message-oriented link). */
export function decodeFrame(bytes: Uint8Array, maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES): Frame {
  const decoder = new FrameDecoder(maxPayloadBytes);
  const frames = decoder.push(bytes);
  decoder.end();
  if (frames.length !== 1) {
    throw new KiwiError('FRAME_TRAILING_BYTES', `Expected one frame in a message, found ${frames.length}. The peer is sending a malformed stream.`);
  }
  return frames[0] as Frame;
}

const State = { HEADER: 0, PAYLOAD: 1, FAILED: 2 } as const;
type State = (typeof State)[keyof typeof State];

/** Streaming decoder: push chunks as they arrive, get whole frames back. */
export class FrameDecoder {
  private state: State = State.HEADER;
  private chunks: Uint8Array[] = [];
  private buffered = 0;
  private pending: { type: FrameType; flags: number; length: number } | undefined;
  private failure: KiwiError | undefined;

  constructor(private readonly maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES) {}

  /** Payloads may be views into the pushed chunks: do not reuse a chunk after pushing it. */
  push(chunk: Uint8Array): Frame[] {
    if (this.state === State.FAILED) throw this.failure as KiwiError;
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const frames: Frame[] = [];
    try {
      for (;;) {
        if (this.state === State.HEADER) {
          if (this.buffered < FRAME_HEADER_BYTES) break;
          this.pending = parseHeader(this.take(FRAME_HEADER_BYTES), this.maxPayloadBytes);
          this.state = State.PAYLOAD;
        }
        const pending = this.pending as { type: FrameType; flags: number; length: number };
        if (this.buffered < pending.length) break;
        frames.push({ type: pending.type, flags: pending.flags, payload: this.take(pending.length) });
        this.pending = undefined;
        this.state = State.HEADER;
      }
    } catch (err) {
      this.state = State.FAILED;
      this.failure = err as KiwiError;
      this.chunks = [];
      throw err;
    }
    return frames;
  }

  /** Call at end of stream: throws FRAME_TRUNCATED if a frame was cut short. */
  end(): void {
    if (this.state === State.FAILED) throw this.failure as KiwiError;
    if (this.buffered > 0 || this.state === State.PAYLOAD) {
      const err = new KiwiError('FRAME_TRUNCATED', `The stream ended inside a frame (${this.buffered} bytes left over). The connection was cut mid-frame.`);
      this.state = State.FAILED;
      this.failure = err;
      throw err;
    }
  }

  /** Bytes held for a frame not yet complete. */
  get bufferedBytes(): number {
    return this.buffered;
  }

  // Removes n bytes (n <= buffered) from the front of the chunk list; copies only when a frame spans chunks.
  private take(n: number): Uint8Array {
    this.buffered -= n;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0] as Uint8Array;
      const need = n - filled;
      if (c.length <= need) {
        out.set(c, filled);
        filled += c.length;
        this.chunks.shift();
      } else {
        out.set(c.subarray(0, need), filled);
        this.chunks[0] = c.subarray(need);
        filled += need;
      }
    }
    return out;
  }
}

function parseHeader(h: Uint8Array, maxPayloadBytes: number): { type: FrameType; flags: number; length: number } {
  if (h[0] !== FRAME_MAGIC) {
    throw new KiwiError('FRAME_BAD_MAGIC', `Not a Kiwi frame (first byte 0x${(h[0] ?? 0).toString(16)}). The peer is not speaking the Kiwi link protocol.`);
  }
  if (h[1] !== FRAME_VERSION) {
    throw new KiwiError('FRAME_BAD_VERSION', `Frame version ${h[1]} is not supported (this Kiwi speaks ${FRAME_VERSION}). Update Kiwi on both machines.`);
  }
  const type = h[2] as number;
  checkType(type);
  checkFlags(h[3] as number);
  const length = new DataView(h.buffer, h.byteOffset, h.byteLength).getUint32(4, false);
  checkLength(length, maxPayloadBytes);
  return { type: type as FrameType, flags: h[3] as number, length };
}

function writeHeader(out: Uint8Array, type: number, flags: number, length: number): void {
  out[0] = FRAME_MAGIC;
  out[1] = FRAME_VERSION;
  out[2] = type;
  out[3] = flags;
  new DataView(out.buffer, out.byteOffset, out.byteLength).setUint32(4, length, false);
}

function checkType(type: number): void {
  if (!KNOWN_TYPES.has(type)) throw new KiwiError('FRAME_UNKNOWN_TYPE', `Unknown frame type ${type}. The peer runs an incompatible Kiwi version.`);
}

function checkFlags(flags: number): void {
  if ((flags & ~KNOWN_FLAGS) !== 0 || flags < 0 || flags > 0xff) {
    throw new KiwiError('FRAME_BAD_FLAGS', `Frame flags 0x${flags.toString(16)} use reserved bits. The peer runs an incompatible Kiwi version.`);
  }
}

function checkLength(length: number, maxPayloadBytes: number): void {
  if (length > maxPayloadBytes) {
    throw new KiwiError('FRAME_TOO_LARGE', `A frame of ${length} bytes exceeds the limit of ${maxPayloadBytes} bytes. The peer must split its data.`, {
      length,
      maxPayloadBytes,
    });
  }
}
