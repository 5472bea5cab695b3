import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { startSessionPake, type PakeKey } from './session-params.js';
import { passwordScalar } from './spake2.js';

const NAMEPLATE = 42;
const code: PakeKey = { w: passwordScalar('purple-sausages', String(NAMEPLATE)) };
const resume = (memberId: string, fill = 7): PakeKey => ({ resume: new Uint8Array(32).fill(fill), memberId });

/** Runs both sides; the session key when each side accepted the other's confirmation. */
function exchange(member: PakeKey, host: PakeKey, hostNameplate = NAMEPLATE): Uint8Array {
  const a = startSessionPake('A', NAMEPLATE, member);
  const b = startSessionPake('B', hostNameplate, host);
  const hostResult = b.finish(a.message);
  const memberResult = a.finish(b.message);
  memberResult.verifyPeerConfirmation(hostResult.confirmation);
  hostResult.verifyPeerConfirmation(memberResult.confirmation);
  expect(memberResult.transcriptHash).toEqual(hostResult.transcriptHash);
  return memberResult.sessionKey;
}

describe('a session\'s key exchange parameters', () => {
  it('agrees on a key when both sides know the code', () => {
    expect(exchange(code, code).length).toBeGreaterThanOrEqual(16);
  });

  it('agrees on a key for a rejoin with the resume secret of the same member', () => {
    expect(exchange(resume('m1'), resume('m1')).length).toBeGreaterThanOrEqual(16);
  });

  it.each([
    ['a wrong code', code, { w: passwordScalar('other-words', String(NAMEPLATE)) }, NAMEPLATE],
    ['a rejoin answered as a join with the code', resume('m1'), code, NAMEPLATE],
    ['a resume secret of another member id', resume('m1'), resume('m2'), NAMEPLATE],
    ['a different resume secret', resume('m1', 7), resume('m1', 8), NAMEPLATE],
    ['another nameplate', code, code, NAMEPLATE + 1],
  ] as const)('refuses %s', (_what, member, host, hostNameplate) => {
    let err: unknown;
    try {
      exchange(member, host, hostNameplate);
    } catch (e) {
      err = e;
    }
    expect(isKiwiError(err, 'PAKE_CONFIRMATION_FAILED')).toBe(true);
  });
});
