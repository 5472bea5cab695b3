// The rendezvous wire protocol, shared by the server and its clients. Text messages are JSON
// validated with zod at every boundary; binary messages are relayed frames:
//
//   relay header: peer u32 BE (client->server: destination; server->client: source) | channel u8 | bytes
//
// The rendezvous learns nameplates, peer numbers and message sizes; PAKE messages are public values,
// everything after the PAKE is ciphertext to it.
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import { parseJson } from '../parse-json.js';

export const RENDEZVOUS_PROTOCOL_VERSION = 1;
export const RELAY_HEADER_BYTES = 5;
/** Relay channels between one pair of peers: the host's control link and the ring's data link. */
export const RelayChannel = { CONTROL: 0, DATA: 1 } as const;
export type RelayChannel = (typeof RelayChannel)[keyof typeof RelayChannel];
export const MAX_RELAY_CHANNEL = 1;
/** The host is always peer 0 of its nameplate. */
export const HOST_PEER = 0;

const peer = z.number().int().min(0).max(0xffff);
const nameplate = z.number().int().min(1).max(9999);
/** An opaque JSON object between peers (PAKE messages); its size is bounded by the text limit. */
const body = z.record(z.string(), z.unknown());

export const ClientMessage = z.discriminatedUnion('t', [
  z.strictObject({ t: z.literal('open'), v: z.literal(RENDEZVOUS_PROTOCOL_VERSION) }),
  /**
   * rejoin: a member the host already approved comes back with its resume secret, not the code. Such
   * a claim is let through a nameplate closed to code guesses; the host refuses code PAKEs on it.
   */
  z.strictObject({ t: z.literal('claim'), v: z.literal(RENDEZVOUS_PROTOCOL_VERSION), nameplate, rejoin: z.literal(true).optional() }),
  z.strictObject({ t: z.literal('send'), to: peer, body }),
  /** Tells the peer that this side closed its relayed link on `channel`. */
  z.strictObject({ t: z.literal('unlink'), to: peer, channel: z.number().int().min(0).max(MAX_RELAY_CHANNEL) }),
  /** Host only: this peer proved the code; it may now relay to other members. */
  z.strictObject({ t: z.literal('admit'), peer }),
  /** Host only: this peer failed the PAKE (counts as a failed attempt) and is disconnected. */
  z.strictObject({ t: z.literal('reject'), peer }),
]);
export type ClientMessage = z.infer<typeof ClientMessage>;

export const ServerMessage = z.discriminatedUnion('t', [
  z.strictObject({ t: z.literal('opened'), nameplate, peer }),
  z.strictObject({ t: z.literal('claimed'), nameplate, peer }),
  z.strictObject({ t: z.literal('peer-joined'), peer, rejoin: z.literal(true).optional() }),
  z.strictObject({ t: z.literal('peer-left'), peer }),
  z.strictObject({ t: z.literal('admitted') }),
  z.strictObject({ t: z.literal('from'), from: peer, body }),
  z.strictObject({ t: z.literal('unlinked'), from: peer, channel: z.number().int().min(0).max(MAX_RELAY_CHANNEL) }),
  /** The nameplate takes no more claims (too many failed attempts, or the host left). */
  z.strictObject({ t: z.literal('nameplate-closed'), reason: z.string().max(200) }),
  z.strictObject({ t: z.literal('error'), code: z.string().max(64), message: z.string().max(500) }),
]);
export type ServerMessage = z.infer<typeof ServerMessage>;

/** Parses and validates one text message; throws RENDEZVOUS_MALFORMED with what was wrong. */
export function parseMessage<T>(schema: z.ZodType<T>, text: string, maxBytes: number): T {
  if (Buffer.byteLength(text, 'utf8') > maxBytes) {
    throw new KiwiError('RENDEZVOUS_MESSAGE_TOO_LARGE', `A rendezvous message exceeds ${maxBytes} bytes.`);
  }
  return parseJson(schema, text, {
    code: 'RENDEZVOUS_MALFORMED',
    notJson: () => 'A rendezvous message is not valid JSON.',
    invalid: ([first]) => `A rendezvous message is malformed: ${first}.`,
  });
}

export function encodeRelay(peerId: number, channel: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(RELAY_HEADER_BYTES + payload.length);
  new DataView(out.buffer).setUint32(0, peerId, false);
  out[4] = channel;
  out.set(payload, RELAY_HEADER_BYTES);
  return out;
}

export function decodeRelay(bytes: Uint8Array): { peer: number; channel: number; payload: Uint8Array } {
  if (bytes.length < RELAY_HEADER_BYTES) throw new KiwiError('RELAY_MALFORMED', `A relayed message of ${bytes.length} bytes is shorter than its header.`);
  const peerId = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, false);
  const channel = bytes[4] as number;
  if (channel > MAX_RELAY_CHANNEL) throw new KiwiError('RELAY_MALFORMED', `Relay channel ${channel} does not exist.`);
  return { peer: peerId, channel, payload: bytes.subarray(RELAY_HEADER_BYTES) };
}
