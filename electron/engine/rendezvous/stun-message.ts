// STUN messages (RFC 8489, formerly 5389) as the rendezvous's STUN service needs them: parse a
// datagram with every length checked, build a Binding success response carrying
// XOR-MAPPED-ADDRESS (and FINGERPRINT), and read one back (the client side, for tests and NAT
// probes). Pure functions over bytes; the UDP socket is stun-server.ts's.
//
// Header: type u16 (top two bits 0) | length u16 (of the attributes, a multiple of 4) |
// magic cookie 0x2112A442 | transaction id (12 bytes); then attributes: type u16 | length u16 |
// value, padded to 4 bytes.
import { isIP } from 'node:net';
import { crc32 } from 'node:zlib';
import { KiwiError } from '../errors.js';

export const STUN_HEADER_BYTES = 20;
export const MAGIC_COOKIE = 0x2112a442;
/** Binding requests are small; larger datagrams are not parsed at all. */
export const MAX_STUN_BYTES = 1280;
const FINGERPRINT_XOR = 0x5354554e;

export const StunAttr = {
  MAPPED_ADDRESS: 0x0001,
  USERNAME: 0x0006,
  MESSAGE_INTEGRITY: 0x0008,
  ERROR_CODE: 0x0009,
  UNKNOWN_ATTRIBUTES: 0x000a,
  XOR_MAPPED_ADDRESS: 0x0020,
  PRIORITY: 0x0024,
  USE_CANDIDATE: 0x0025,
  SOFTWARE: 0x8022,
  FINGERPRINT: 0x8028,
  ICE_CONTROLLED: 0x8029,
  ICE_CONTROLLING: 0x802a,
  /** RFC 5780: where the server answers from another port (and address), for NAT behaviour tests. */
  OTHER_ADDRESS: 0x802c,
} as const;

/** Comprehension-required attributes (0x0000-0x7fff) a Binding request may carry that this server understands (or may ignore). */
const UNDERSTOOD = new Set<number>([
  StunAttr.MAPPED_ADDRESS, StunAttr.USERNAME, StunAttr.MESSAGE_INTEGRITY, StunAttr.XOR_MAPPED_ADDRESS, StunAttr.PRIORITY, StunAttr.USE_CANDIDATE,
  0x001c /* MESSAGE-INTEGRITY-SHA256 */, 0x0014 /* REALM */, 0x0015 /* NONCE */, 0x001e /* USERHASH */,
]);

export const StunClass = { REQUEST: 0, INDICATION: 1, SUCCESS: 2, ERROR: 3 } as const;
export const BINDING = 0x0001;

export interface StunAttribute {
  type: number;
  /** The value without padding; `offset` is where its header starts in the message. */
  value: Uint8Array;
  offset: number;
}

export interface StunMessage {
  method: number;
  cls: number;
  transactionId: Uint8Array;
  attributes: StunAttribute[];
}

export interface MappedAddress {
  family: 'IPv4' | 'IPv6';
  address: string;
  port: number;
}

const malformed = (why: string): KiwiError => new KiwiError('STUN_MALFORMED', `Not a valid STUN message: ${why}.`);

/** Parses one datagram; STUN_MALFORMED says what is wrong. A FINGERPRINT, when present, must be last and correct. */
export function parseStun(bytes: Uint8Array): StunMessage {
  if (bytes.length < STUN_HEADER_BYTES) throw malformed('shorter than its header');
  if (bytes.length > MAX_STUN_BYTES) throw malformed(`longer than ${MAX_STUN_BYTES} bytes`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const type = view.getUint16(0);
  if ((type & 0xc000) !== 0) throw malformed('the first two bits are not zero');
  const length = view.getUint16(2);
  if (length % 4 !== 0 || STUN_HEADER_BYTES + length !== bytes.length) throw malformed('its length field does not match the datagram');
  if (view.getUint32(4) !== MAGIC_COOKIE) throw malformed('no magic cookie (an RFC 3489 client?)');
  const attributes: StunAttribute[] = [];
  let at = STUN_HEADER_BYTES;
  while (at < bytes.length) {
    if (at + 4 > bytes.length) throw malformed('an attribute header is cut off');
    const attrType = view.getUint16(at);
    const attrLength = view.getUint16(at + 2);
    const padded = (attrLength + 3) & ~3;
    if (at + 4 + padded > bytes.length) throw malformed(`attribute 0x${attrType.toString(16)} runs past the end`);
    if (attributes.some((a) => a.type === StunAttr.FINGERPRINT)) throw malformed('an attribute follows the FINGERPRINT');
    attributes.push({ type: attrType, value: bytes.subarray(at + 4, at + 4 + attrLength), offset: at });
    at += 4 + padded;
  }
  const fp = attributes.find((a) => a.type === StunAttr.FINGERPRINT);
  if (fp !== undefined) {
    if (fp.value.length !== 4) throw malformed('the FINGERPRINT is not 4 bytes');
    const expected = (crc32(bytes.subarray(0, fp.offset)) ^ FINGERPRINT_XOR) >>> 0;
    if (new DataView(fp.value.buffer, fp.value.byteOffset, 4).getUint32(0) !== expected) throw malformed('the FINGERPRINT does not match');
  }
  // Method: bits M0-M11 around the class bits C0 (bit 4) and C1 (bit 8).
  const method = (type & 0x000f) | ((type & 0x00e0) >> 1) | ((type & 0x3e00) >> 2);
  const cls = ((type & 0x0010) >> 4) | ((type & 0x0100) >> 7);
  return { method, cls, transactionId: new Uint8Array(bytes.subarray(8, 20)), attributes };
}

/** The comprehension-required attributes of a request this server does not understand (answered with 420). */
export function unknownRequired(msg: StunMessage): number[] {
  return msg.attributes.map((a) => a.type).filter((t) => t < 0x8000 && !UNDERSTOOD.has(t));
}

function messageType(method: number, cls: number): number {
  return (method & 0x000f) | ((method & 0x0070) << 1) | ((method & 0x0f80) << 2) | ((cls & 1) << 4) | ((cls & 2) << 7);
}

/** Builds a message: header, attributes (padded), and a FINGERPRINT last. */
export function encodeStun(method: number, cls: number, transactionId: Uint8Array, attributes: Array<{ type: number; value: Uint8Array }>): Uint8Array {
  if (transactionId.length !== 12) throw new Error('a STUN transaction id has 12 bytes');
  const body = attributes.reduce((n, a) => n + 4 + ((a.value.length + 3) & ~3), 0);
  const out = new Uint8Array(STUN_HEADER_BYTES + body + 8);
  const view = new DataView(out.buffer);
  view.setUint16(0, messageType(method, cls));
  view.setUint16(2, body + 8);
  view.setUint32(4, MAGIC_COOKIE);
  out.set(transactionId, 8);
  let at = STUN_HEADER_BYTES;
  for (const a of attributes) {
    view.setUint16(at, a.type);
    view.setUint16(at + 2, a.value.length);
    out.set(a.value, at + 4);
    at += 4 + ((a.value.length + 3) & ~3);
  }
  view.setUint16(at, StunAttr.FINGERPRINT);
  view.setUint16(at + 2, 4);
  view.setUint32(at + 4, (crc32(out.subarray(0, at)) ^ FINGERPRINT_XOR) >>> 0);
  return out;
}

/** XOR-MAPPED-ADDRESS's value for an address and port (IPv4-mapped IPv6 addresses are sent as IPv4). */
export function xorMappedAddress(address: string, port: number, transactionId: Uint8Array): Uint8Array {
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] ?? (isIP(address) === 4 ? address : undefined);
  const raw = v4 !== undefined ? Uint8Array.from(v4.split('.').map(Number)) : ipv6Bytes(address);
  const out = new Uint8Array(4 + raw.length);
  const view = new DataView(out.buffer);
  out[1] = raw.length === 4 ? 0x01 : 0x02;
  view.setUint16(2, port ^ (MAGIC_COOKIE >>> 16));
  const key = new Uint8Array(16);
  new DataView(key.buffer).setUint32(0, MAGIC_COOKIE);
  key.set(transactionId, 4);
  for (let i = 0; i < raw.length; i++) out[4 + i] = (raw[i] as number) ^ (key[i] as number);
  return out;
}

/** A MAPPED-ADDRESS-style value (not XORed), as OTHER-ADDRESS carries: the XOR form with a zero key. */
export function plainAddress(address: string, port: number): Uint8Array {
  const v = xorMappedAddress(address, port, new Uint8Array(12));
  // Undo the cookie XOR on port and the first 4 address bytes.
  const view = new DataView(v.buffer);
  view.setUint16(2, port);
  const cookie = [0x21, 0x12, 0xa4, 0x42];
  for (let i = 0; i < 4; i++) v[4 + i] = (v[4 + i] as number) ^ (cookie[i] as number);
  return v;
}

/** Reads a MAPPED-ADDRESS or OTHER-ADDRESS value. */
export function readPlainAddress(value: Uint8Array): MappedAddress {
  const key = Uint8Array.of(0x21, 0x12, 0xa4, 0x42);
  // A copy with its own buffer (on a Buffer, slice() is a view into the datagram).
  const x = new Uint8Array(value);
  if (x.length >= 4) new DataView(x.buffer).setUint16(2, new DataView(x.buffer).getUint16(2) ^ (MAGIC_COOKIE >>> 16));
  for (let i = 0; i < 4 && 4 + i < x.length; i++) x[4 + i] = (x[4 + i] as number) ^ (key[i] as number);
  return readXorMappedAddress(x, new Uint8Array(12));
}

/** Reads an XOR-MAPPED-ADDRESS value back. */
export function readXorMappedAddress(value: Uint8Array, transactionId: Uint8Array): MappedAddress {
  const family = value[1];
  if (value.length < 4 || !((family === 0x01 && value.length === 8) || (family === 0x02 && value.length === 20))) throw malformed('a bad XOR-MAPPED-ADDRESS');
  const key = new Uint8Array(16);
  new DataView(key.buffer).setUint32(0, MAGIC_COOKIE);
  key.set(transactionId, 4);
  const port = new DataView(value.buffer, value.byteOffset).getUint16(2) ^ (MAGIC_COOKIE >>> 16);
  const raw = value.subarray(4).map((b, i) => b ^ (key[i] as number));
  if (family === 0x01) return { family: 'IPv4', address: [...raw].join('.'), port };
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((raw[i] as number) << 8) | (raw[i + 1] as number)).toString(16));
  return { family: 'IPv6', address: groups.join(':'), port };
}

function ipv6Bytes(address: string): Uint8Array {
  const [head = '', tail] = address.split('%')[0]!.split('::');
  const parts = (s: string): number[] => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const h = parts(head);
  const t = tail !== undefined ? parts(tail) : [];
  const groups = tail !== undefined ? [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t] : h;
  if (groups.length !== 8 || groups.some((g) => !(g >= 0 && g <= 0xffff))) throw new Error(`not an IPv6 address: ${address}`);
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    out[2 * i] = g >> 8;
    out[2 * i + 1] = g & 0xff;
  });
  return out;
}
