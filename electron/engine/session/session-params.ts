// What host and member of a session agree on outside the messages themselves: the SPAKE2 (RFC 9382)
// identities and AAD of a join and of a rejoin, the context the control link's key is bound to,
// and the close reason a replaced connection carries. Both sides build their key exchange here,
// so the two can never disagree on a parameter.
import { secretScalar, spake2Start, type Spake2Pending, type Spake2Role } from './spake2.js';

export const PAKE_ID_MEMBER = new TextEncoder().encode('kiwi member');
export const PAKE_ID_HOST = new TextEncoder().encode('kiwi host');
/** How the host closes a member's older connection when the same identity connects again. */
export const REPLACED_REASON = 'replaced by a new connection';
/** Wrong codes the host answers per session before it stops answering key exchanges with the code. */
export const DEFAULT_MAX_PAKE_FAILURES = 20;

export const pakeAad = (nameplate: number): Uint8Array => new TextEncoder().encode(`kiwi/1 nameplate ${nameplate}`);
/** A rejoin's PAKE: bound to the member it resumes. */
export const rejoinAad = (nameplate: number, memberId: string): Uint8Array => new TextEncoder().encode(`kiwi/1 nameplate ${nameplate} rejoin ${memberId}`);
export const rejoinScalar = (secret: Uint8Array, nameplate: number, memberId: string): bigint => secretScalar(secret, `resume|${nameplate}|${memberId}`);
export const controlContext = (nameplate: number, peer: number): string => `control|${nameplate}|${peer}`;

/** What a key exchange proves: the session code (its password scalar), or an approved member's resume secret. */
export type PakeKey = { w: bigint } | { resume: Uint8Array; memberId: string };

/** Starts a session's key exchange; the member is always role A, the host role B. */
export function startSessionPake(role: Spake2Role, nameplate: number, key: PakeKey): Spake2Pending {
  const ids = { idA: PAKE_ID_MEMBER, idB: PAKE_ID_HOST };
  if ('w' in key) return spake2Start({ role, w: key.w, ...ids, aad: pakeAad(nameplate) });
  return spake2Start({ role, w: rejoinScalar(key.resume, nameplate, key.memberId), ...ids, aad: rejoinAad(nameplate, key.memberId) });
}
