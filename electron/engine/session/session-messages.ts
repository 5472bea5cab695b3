// Messages between a host and its members, validated with zod where they enter. PAKE messages
// travel as JSON bodies through the rendezvous (public values only); control messages travel
// inside the encrypted control link once the PAKE succeeded.
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import { parseJson } from '../parse-json.js';
import { MAX_CANDIDATE_CHARS, MAX_MID_CHARS, MAX_SDP_CHARS } from '../transport/ice-signal.js';
import { sanitizeName } from './member-name.js';

const b64 = (maxBytes: number) =>
  z.string().max(Math.ceil(maxBytes / 3) * 4).regex(/^[A-Za-z0-9+/]*={0,2}$/, 'base64');

export const PakeBody = z.discriminatedUnion('kind', [
  /** member -> host: pA */
  z.strictObject({ kind: z.literal('pake'), msg: b64(65) }),
  /** host -> member: pB and the host's confirmation MAC */
  z.strictObject({ kind: z.literal('pake-reply'), msg: b64(65), confirm: b64(32) }),
  /** member -> host: the member's confirmation MAC */
  z.strictObject({ kind: z.literal('confirm'), confirm: b64(32) }),
  /**
   * member -> host, instead of 'pake': pA of a rejoin, whose password is the resume secret the host
   * gave this approved member (identity.ts proves the key afterwards). It bypasses the code's guess
   * limits because the secret has 256 bits: a wrong one teaches nothing about the code.
   */
  z.strictObject({ kind: z.literal('rejoin'), memberId: z.string().regex(/^[A-Za-z0-9_-]{8,64}$/), msg: b64(65) }),
]);
export type PakeBody = z.infer<typeof PakeBody>;

const memberId = z.string().regex(/^[A-Za-z0-9_-]{8,64}$/, 'member id');
/** Shown on terminals and screens: stripped of escapes and controls where it enters (member-name.ts). */
const name = z.string().max(256).transform(sanitizeName).refine((n) => n !== '', 'a name with something visible in it');
/** ws:// URLs of a member's direct listener. */
const address = z.string().max(200).regex(/^wss?:\/\/[^\s]+$/, 'ws address');
const capabilities = z.record(z.string().max(64), z.unknown());
const peer = z.number().int().min(0).max(0xffff);
const linkRole = z.enum(['initiator', 'responder']);
const pipelineBody = z.record(z.string().max(64), z.unknown());
/** One ICE signal of a ring link (transport/ice-link.ts), relayed by the host between the link's two ends. */
const iceSignal = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.enum(['offer', 'answer']), sdp: z.string().min(1).max(MAX_SDP_CHARS) }),
  z.strictObject({ kind: z.literal('candidate'), candidate: z.string().min(1).max(MAX_CANDIDATE_CHARS), mid: z.string().max(MAX_MID_CHARS) }),
  z.strictObject({ kind: z.literal('unavailable') }),
]);
/** linkId: the link's id from its 'link' assignment, so a signal only reaches the link it is for. */
const iceMessage = z.strictObject({ type: z.literal('ice'), peer, linkId: b64(16), signal: iceSignal });

export const RosterEntry = z.strictObject({
  peer,
  name,
  state: z.enum(['pending', 'active', 'soft-evicted', 'evicted', 'left', 'rejected']),
  connected: z.boolean(),
  inRing: z.boolean(),
});
export type RosterEntry = z.infer<typeof RosterEntry>;

export const MemberToHost = z.discriminatedUnion('type', [
  /** memberId derives from publicKey; signature: Ed25519 over this connection's PAKE transcript (identity.ts). */
  z.strictObject({
    type: z.literal('hello'), memberId, name, publicKey: b64(32), signature: b64(64), addresses: z.array(address).max(8), capabilities: capabilities.optional(),
  }),
  z.strictObject({ type: z.literal('heartbeat') }),
  z.strictObject({ type: z.literal('capabilities'), capabilities }),
  z.strictObject({ type: z.literal('leave') }),
  z.strictObject({
    type: z.literal('link-status'), peer, kind: z.enum(['direct', 'relayed']), rttMs: z.number().nonnegative().max(600_000),
    throughputMBps: z.number().positive().max(1e6).optional(), transport: z.enum(['udp', 'tcp', 'relay']).optional(),
  }),
  /** member -> host: an ICE signal for ring neighbour `peer` (the host itself when 0); the host forwards it. */
  iceMessage,
  /** A ring link closed or could not be established: the host re-plans at once rather than waiting for silence. */
  z.strictObject({ type: z.literal('link-down'), peer, state: z.enum(['closed', 'failed']), reason: z.string().max(200) }),
  /** Pipeline traffic (assignments, readiness, weights); its body is validated by engine/pipeline. */
  z.strictObject({ type: z.literal('pipeline'), body: pipelineBody }),
]);
export type MemberToHost = z.infer<typeof MemberToHost>;

export const HostToMember = z.discriminatedUnion('type', [
  /** resume: the secret an approved member rejoins with (PakeBody 'rejoin'), kept in memory only. */
  z.strictObject({ type: z.literal('welcome'), state: z.enum(['pending', 'active']), resume: b64(32).optional() }),
  z.strictObject({ type: z.literal('approved'), resume: b64(32).optional() }),
  z.strictObject({ type: z.literal('rejected'), reason: z.string().max(200) }),
  /** Keys for a ring link to another participant (the host is peer 0). */
  z.strictObject({ type: z.literal('link'), peer, linkId: b64(16), secret: b64(32), role: linkRole, addresses: z.array(address).max(8) }),
  z.strictObject({ type: z.literal('evicted'), reason: z.string().max(200) }),
  z.strictObject({ type: z.literal('pipeline'), body: pipelineBody }),
  /** Who else is in the session, so members show names instead of peer numbers. */
  z.strictObject({ type: z.literal('roster'), members: z.array(RosterEntry).max(1024) }),
  /** host -> member: an ICE signal from ring neighbour `peer` (0: the host). */
  iceMessage,
]);
export type HostToMember = z.infer<typeof HostToMember>;

const MAX_CONTROL_BYTES = 64 * 1024;

/**
 * A control message that starts with this byte is binary pipeline data (weights), passed to
 * engine/pipeline as bytes; JSON messages start with '{'. Binary avoids base64 for bulk bytes.
 */
export const BINARY_CONTROL = 0x00;

export function decodeControl<T>(schema: z.ZodType<T>, bytes: Uint8Array): T {
  if (bytes.length > MAX_CONTROL_BYTES) throw new KiwiError('CONTROL_TOO_LARGE', `A control message of ${bytes.length} bytes exceeds ${MAX_CONTROL_BYTES}.`);
  return parseJson(schema, Buffer.from(bytes).toString('utf8'), {
    code: 'CONTROL_MALFORMED',
    notJson: () => 'A control message is not valid JSON.',
    invalid: ([first]) => `A control message is malformed: ${first}.`,
  });
}

export function encodeControl(msg: MemberToHost | HostToMember): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(msg));
}

export function parseBody<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) throw new KiwiError('PAKE_INVALID_MESSAGE', `A key exchange message is malformed: ${r.error.issues[0]?.message ?? 'invalid'}.`);
  return r.data;
}

export const toB64 = (b: Uint8Array): string => Buffer.from(b).toString('base64');
export const fromB64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'base64'));
