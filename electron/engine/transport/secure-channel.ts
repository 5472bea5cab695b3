// The record layer of every link: ChaCha20-Poly1305 (RFC 8439, node:crypto) with one key per
// direction derived by HKDF-SHA256 (RFC 5869) from a shared secret and both sides' fresh nonces.
// The 64-bit record counter is the nonce, so a nonce is never reused under a key; the receiver
// accepts only the next counter, so replayed, dropped or reordered records are refused.
//
// Sealed frame payload:  counter u64 BE (8) | ciphertext (n) | Poly1305 tag (16)
// AEAD nonce: 4 zero bytes | counter u64 BE.  AAD: the 8-byte frame header (type, flags, length).
import { createCipheriv, createDecipheriv, hkdfSync } from 'node:crypto';
import { KiwiError } from '../errors.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeFrameHeader, FRAME_HEADER_BYTES, FrameFlags, type Frame, type FrameType } from './frame-codec.js';

export const KEY_BYTES = 32;
const TAG_BYTES = 16;
const COUNTER_BYTES = 8;
/** Bytes a sealed payload adds to the plaintext. */
export const SEAL_OVERHEAD_BYTES = COUNTER_BYTES + TAG_BYTES;

export interface ChannelKeys {
  sendKey: Uint8Array;
  receiveKey: Uint8Array;
}

export type LinkRole = 'initiator' | 'responder';

/**
 * Per-direction keys for one connection. Fresh nonces from both sides make every connection's
 * keys new, so records recorded from an earlier connection cannot be replayed into a later one.
 */
export function deriveChannelKeys(secret: Uint8Array, role: LinkRole, initiatorNonce: Uint8Array, responderNonce: Uint8Array, context: string): ChannelKeys {
  if (secret.length < 16) throw new Error('link secret must have at least 128 bits');
  const salt = Buffer.concat([initiatorNonce, responderNonce]);
  const key = (dir: string): Uint8Array => new Uint8Array(hkdfSync('sha256', secret, salt, `kiwi link v1|${context}|${dir}`, KEY_BYTES));
  const i2r = key('initiator->responder');
  const r2i = key('responder->initiator');
  return role === 'initiator' ? { sendKey: i2r, receiveKey: r2i } : { sendKey: r2i, receiveKey: i2r };
}

export class SecureChannel {
  private sendCounter = 0n;
  private receiveCounter = 0n;
  private readonly maxPlaintextBytes: number;

  constructor(
    private readonly keys: ChannelKeys,
    private readonly maxPayloadBytes = DEFAULT_MAX_PAYLOAD_BYTES,
  ) {
    if (keys.sendKey.length !== KEY_BYTES || keys.receiveKey.length !== KEY_BYTES) throw new Error('channel keys must be 32 bytes');
    this.maxPlaintextBytes = maxPayloadBytes - SEAL_OVERHEAD_BYTES;
  }

  /** Encrypts one record and returns the whole frame (header + sealed payload). */
  seal(type: FrameType, plaintext: Uint8Array): Uint8Array {
    if (plaintext.length > this.maxPlaintextBytes) {
      throw new KiwiError('FRAME_TOO_LARGE', `A message of ${plaintext.length} bytes exceeds the link limit of ${this.maxPlaintextBytes} bytes.`);
    }
    if (this.sendCounter >= 0xffff_ffff_ffff_ffffn) {
      throw new KiwiError('CHANNEL_COUNTER_EXHAUSTED', 'This link has sent 2^64 records; reconnect to get fresh keys.');
    }
    const counter = this.sendCounter++;
    const payloadBytes = SEAL_OVERHEAD_BYTES + plaintext.length;
    const header = encodeFrameHeader(type, FrameFlags.SEALED, payloadBytes, this.maxPayloadBytes);
    const out = new Uint8Array(FRAME_HEADER_BYTES + payloadBytes);
    out.set(header, 0);
    const view = new DataView(out.buffer);
    view.setBigUint64(FRAME_HEADER_BYTES, counter, false);
    const cipher = createCipheriv('chacha20-poly1305', this.keys.sendKey, nonceFor(counter), { authTagLength: TAG_BYTES });
    cipher.setAAD(header, { plaintextLength: plaintext.length });
    const body = cipher.update(plaintext);
    cipher.final();
    out.set(body, FRAME_HEADER_BYTES + COUNTER_BYTES);
    out.set(cipher.getAuthTag(), FRAME_HEADER_BYTES + COUNTER_BYTES + plaintext.length);
    return out;
  }

  /** Authenticates and decrypts one received frame; returns the plaintext. */
  open(frame: Frame): Uint8Array {
    if ((frame.flags & FrameFlags.SEALED) === 0) {
      throw new KiwiError('CHANNEL_NOT_SEALED', 'The peer sent an unencrypted frame on an encrypted link; the link is closed.');
    }
    const p = frame.payload;
    if (p.length < SEAL_OVERHEAD_BYTES) {
      throw new KiwiError('CHANNEL_RECORD_TOO_SHORT', `A sealed record of ${p.length} bytes is shorter than its ${SEAL_OVERHEAD_BYTES}-byte overhead.`);
    }
    const counter = new DataView(p.buffer, p.byteOffset, p.byteLength).getBigUint64(0, false);
    const header = encodeFrameHeader(frame.type, frame.flags, p.length, this.maxPayloadBytes);
    const decipher = createDecipheriv('chacha20-poly1305', this.keys.receiveKey, nonceFor(counter), { authTagLength: TAG_BYTES });
    const bodyEnd = p.length - TAG_BYTES;
    decipher.setAAD(header, { plaintextLength: bodyEnd - COUNTER_BYTES });
    decipher.setAuthTag(p.subarray(bodyEnd));
    const plaintext = decipher.update(p.subarray(COUNTER_BYTES, bodyEnd));
    try {
      decipher.final();
    } catch {
      // node reports only "unable to authenticate data"; the code says what it means here.
      throw new KiwiError('CHANNEL_AUTH_FAILED', 'A record failed authentication: it was altered, or the peer holds a different key. The link is closed.');
    }
    // Checked after authentication, so only a genuine earlier record can be reported as a replay.
    if (counter < this.receiveCounter) {
      throw new KiwiError('CHANNEL_REPLAY', `Record ${counter} was already received (expected ${this.receiveCounter}); a replay was refused.`);
    }
    if (counter > this.receiveCounter) {
      throw new KiwiError('CHANNEL_OUT_OF_ORDER', `Record ${counter} arrived before record ${this.receiveCounter}; records must arrive in order.`);
    }
    this.receiveCounter++;
    return new Uint8Array(plaintext.buffer, plaintext.byteOffset, plaintext.byteLength);
  }
}

function nonceFor(counter: bigint): Buffer {
  const nonce = Buffer.alloc(12);
  nonce.writeBigUInt64BE(counter, 4);
  return nonce;
}
