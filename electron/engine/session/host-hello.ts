// The host's check of a member's hello: the key must own the memberId and have signed this
// connection's PAKE transcript (identity.ts), so without the member's secret key nobody can say
// hello as it (nor push it out), and a rejoin may only resume the member its PAKE was bound to.
import { KiwiError } from '../errors.js';
import { fingerprint, verifyHello } from './identity.js';
import { fromB64, type MemberToHost } from './session-messages.js';

export interface HelloContext {
  nameplate: number;
  peer: number;
  /** The PAKE transcript of this connection, which the hello signs. */
  transcriptHash: Uint8Array;
  /** Set for a rejoin: the only identity this connection may say hello as. */
  expectedMemberId: string | undefined;
}

/** Throws IDENTITY_INVALID for a hello this connection may not make; returns the member's fingerprint for this connection. */
export function checkHello(msg: Extract<MemberToHost, { type: 'hello' }>, c: HelloContext): string {
  const publicKey = fromB64(msg.publicKey);
  verifyHello({ memberId: msg.memberId, publicKey, signature: fromB64(msg.signature), nameplate: c.nameplate, peer: c.peer, transcriptHash: c.transcriptHash });
  if (c.expectedMemberId !== undefined && c.expectedMemberId !== msg.memberId) {
    throw new KiwiError('IDENTITY_INVALID', `A rejoin resumed member ${c.expectedMemberId} but said hello as ${msg.memberId}.`);
  }
  return fingerprint(publicKey, c.transcriptHash);
}
