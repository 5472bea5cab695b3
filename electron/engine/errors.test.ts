import { describe, expect, it } from 'vitest';
import { isKiwiError, isKiwiErrorCode, KIWI_ERROR_CODES, KiwiError, knownCodeOr } from './errors.js';

describe('KiwiErrorCode', () => {
  it('is a closed list: a code not in it does not compile', () => {
    // @ts-expect-error 'NOT_A_KIWI_CODE' is not a KiwiErrorCode (tsc fails if the union ever opens up again)
    const err = new KiwiError('NOT_A_KIWI_CODE', 'x');
    expect(err.code).toBe('NOT_A_KIWI_CODE');
    expect(isKiwiError(new KiwiError('USAGE', 'x'), 'USAGE')).toBe(true);
  });

  it('checks codes read off a wire against the list', () => {
    expect(new Set(KIWI_ERROR_CODES).size).toBe(KIWI_ERROR_CODES.length);
    expect(isKiwiErrorCode('RING_BROKEN')).toBe(true);
    expect(isKiwiErrorCode('NOT_A_KIWI_CODE')).toBe(false);
    expect(isKiwiErrorCode(7)).toBe(false);
    expect(knownCodeOr('SESSION_EVICTED', 'RENDEZVOUS_UNEXPECTED')).toBe('SESSION_EVICTED');
    expect(knownCodeOr('A_NEWER_PEERS_CODE', 'RENDEZVOUS_UNEXPECTED')).toBe('RENDEZVOUS_UNEXPECTED');
  });
});
