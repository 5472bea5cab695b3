// SPAKE2 over P-256 exactly as RFC 9382 specifies it (ciphersuite
// SPAKE2-P256-SHA256-HKDF-SHA256-HMAC-SHA256), with its key confirmation, so that the words of a
// session code become a shared key that an eavesdropper or the rendezvous cannot learn, and a
// wrong code fails with PAKE_CONFIRMATION_FAILED. Curve arithmetic: @noble/curves; hashes: node:crypto.
import { createHash, createHmac, hkdfSync, randomBytes, scryptSync, timingSafeEqual } from 'node:crypto';
import { p256 } from '@noble/curves/nist.js';
import { KiwiError } from '../errors.js';

type Point = InstanceType<typeof p256.Point>;
const Point = p256.Point;
const ORDER = Point.Fn.ORDER;

// RFC 9382 section 6 / 4: the P-256 M and N points (compressed SEC1), generated verifiably from seeds.
const M = Point.fromHex('02886e2f97ace46e55ba9dd7242579f2993b64e16ef3dcab95afd497333d8fa12f');
const N = Point.fromHex('03d8bbd6c639c62937b04d997f38c3770719c629d7014d49a24b4f98baa1292b49');

/** An uncompressed SEC1 P-256 point, the encoding RFC 9382's vectors use. */
export const SPAKE2_MESSAGE_BYTES = 65;
/** The MAC of key confirmation (HMAC-SHA256). */
export const SPAKE2_CONFIRMATION_BYTES = 32;

export type Spake2Role = 'A' | 'B';

export interface Spake2Options {
  role: Spake2Role;
  /** The password scalar w (see passwordScalar). */
  w: bigint;
  idA: Uint8Array;
  idB: Uint8Array;
  /** Associated data bound into the confirmation keys (RFC 9382 section 4). */
  aad?: Uint8Array;
  /** The ephemeral scalar; random unless a test supplies the RFC's. */
  secret?: bigint;
}

export interface Spake2Pending {
  /** pA (role A) or pB (role B), to send to the peer. */
  message: Uint8Array;
  finish(peerMessage: Uint8Array): Spake2Result;
}

export interface Spake2Result {
  /** Ke: the shared secret (16 bytes). Only use it after the peer's confirmation verified. */
  sessionKey: Uint8Array;
  /** Hash(TT), exposed for the test vectors. */
  transcriptHash: Uint8Array;
  /** KcA, KcB (16 bytes each), exposed for the test vectors. */
  confirmationKeys: { a: Uint8Array; b: Uint8Array };
  /** This side's confirmation MAC, to send to the peer. */
  confirmation: Uint8Array;
  /** Throws PAKE_CONFIRMATION_FAILED unless the peer's MAC proves it knows the same password. */
  verifyPeerConfirmation(mac: Uint8Array): void;
}

/**
 * w from a password. RFC 9382 section 3.2 asks for a memory-hard function; scrypt (node:crypto)
 * salted with the public context. 40 bytes reduced mod n keep the bias below 2^-64.
 */
export function passwordScalar(password: string, salt: string): bigint {
  const out = scryptSync(password.normalize('NFKC'), `kiwi spake2 v1|${salt}`, 40, { N: 1 << 14, r: 8, p: 1 });
  return bytesToBigInt(out) % ORDER;
}

/** w from a secret that already has full entropy (a resume secret): no stretching needed. */
export function secretScalar(secret: Uint8Array, salt: string): bigint {
  const out = new Uint8Array(hkdfSync('sha256', secret, Buffer.from(`kiwi spake2 secret v1|${salt}`), new Uint8Array(0), 40));
  return bytesToBigInt(out) % ORDER;
}

export function spake2Start(opts: Spake2Options): Spake2Pending {
  const w = opts.w % ORDER;
  const secret = opts.secret ?? randomScalar();
  if (secret <= 0n || secret >= ORDER) throw new Error('SPAKE2 ephemeral scalar out of range');
  const own = Point.BASE.multiply(secret).add((opts.role === 'A' ? M : N).multiplyUnsafe(w));
  const message = own.toBytes(false);
  let finished = false;
  return {
    message,
    finish(peerMessage: Uint8Array): Spake2Result {
      if (finished) throw new Error('SPAKE2 exchange already finished');
      finished = true;
      const peer = decodeMessage(peerMessage);
      // K = h * x * (pB - w*N) for A, h * y * (pA - w*M) for B; h = 1 on P-256.
      const blind = (opts.role === 'A' ? N : M).multiplyUnsafe(w);
      const kPoint = peer.subtract(blind).multiply(secret);
      if (kPoint.is0()) throw new KiwiError('PAKE_INVALID_MESSAGE', 'The peer\'s key exchange message is invalid (it yields the identity point).');
      const [pA, pB] = opts.role === 'A' ? [message, peerMessage] : [peerMessage, message];
      const tt = transcript([opts.idA, opts.idB, pA, pB, kPoint.toBytes(false), bigIntToBytes(w, 32)]);
      return keySchedule(opts.role, tt, opts.aad ?? new Uint8Array(0));
    },
  };
}

function keySchedule(role: Spake2Role, tt: Uint8Array, aad: Uint8Array): Spake2Result {
  const hash = createHash('sha256').update(tt).digest();
  const ke = new Uint8Array(hash.subarray(0, 16));
  const ka = hash.subarray(16, 32);
  // KcA || KcB = KDF(nil, Ka, "ConfirmationKeys" || AAD), RFC 9382 section 4.
  const kc = new Uint8Array(hkdfSync('sha256', ka, new Uint8Array(0), Buffer.concat([Buffer.from('ConfirmationKeys'), aad]), 32));
  const kcA = kc.slice(0, 16);
  const kcB = kc.slice(16, 32);
  const macA = new Uint8Array(createHmac('sha256', kcA).update(tt).digest());
  const macB = new Uint8Array(createHmac('sha256', kcB).update(tt).digest());
  const [own, expected] = role === 'A' ? [macA, macB] : [macB, macA];
  return {
    sessionKey: ke,
    transcriptHash: new Uint8Array(hash),
    confirmationKeys: { a: kcA, b: kcB },
    confirmation: own,
    verifyPeerConfirmation(mac: Uint8Array): void {
      if (mac.length !== expected.length || !timingSafeEqual(mac, expected)) {
        throw new KiwiError(
          'PAKE_CONFIRMATION_FAILED',
          'The session code does not match: the other side used different words. Check the code with the host and try again.',
        );
      }
    },
  };
}

function decodeMessage(bytes: Uint8Array): Point {
  if (bytes.length !== SPAKE2_MESSAGE_BYTES || bytes[0] !== 0x04) {
    throw new KiwiError('PAKE_INVALID_MESSAGE', `The peer's key exchange message must be a ${SPAKE2_MESSAGE_BYTES}-byte uncompressed P-256 point.`);
  }
  let point: Point;
  try {
    point = Point.fromBytes(bytes);
  } catch (err) {
    throw new KiwiError('PAKE_INVALID_MESSAGE', `The peer's key exchange message is not a point on P-256 (${(err as Error).message}).`);
  }
  point.assertValidity();
  return point;
}

/** TT: each field prefixed by its length as an 8-byte little-endian integer (RFC 9382 section 3.3). */
function transcript(fields: Uint8Array[]): Uint8Array {
  const parts: Buffer[] = [];
  for (const f of fields) {
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(f.length));
    parts.push(len, Buffer.from(f));
  }
  return new Uint8Array(Buffer.concat(parts));
}

function randomScalar(): bigint {
  for (;;) {
    const s = bytesToBigInt(randomBytes(48)) % ORDER;
    if (s !== 0n) return s;
  }
}

function bytesToBigInt(bytes: Uint8Array): bigint {
  return bytes.length === 0 ? 0n : BigInt(`0x${Buffer.from(bytes).toString('hex')}`);
}

function bigIntToBytes(value: bigint, length: number): Uint8Array {
  return new Uint8Array(Buffer.from(value.toString(16).padStart(length * 2, '0'), 'hex'));
}
