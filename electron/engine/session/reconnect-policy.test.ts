import { describe, expect, it } from 'vitest';
import type { KiwiErrorCode } from '../errors.js';
import { reconnectVerdict, type ReconnectVerdict } from './reconnect-policy.js';

describe('what a member does after a failed reconnect', () => {
  it.each<[KiwiErrorCode, boolean, ReconnectVerdict]>([
    ['NAMEPLATE_UNKNOWN', false, 'session-ended'],
    ['NAMEPLATE_UNKNOWN', true, 'session-ended'],
    ['PAKE_CONFIRMATION_FAILED', true, 'forget-resume'],
    ['PAKE_UNEXPECTED', true, 'forget-resume'],
    ['SESSION_REJECTED', true, 'forget-resume'],
    ['PAKE_CONFIRMATION_FAILED', false, 'fatal'],
    ['SESSION_REJECTED', false, 'fatal'],
    ['NAMEPLATE_CLOSED', false, 'fatal'],
    ['NAMEPLATE_CLOSED', true, 'fatal'],
    ['PAKE_UNEXPECTED', false, 'retry'],
    ['SESSION_TIMEOUT', true, 'retry'],
    ['RENDEZVOUS_CLOSED', false, 'retry'],
  ])('%s (with a resume secret: %s): %s', (code, withResume, verdict) => {
    expect(reconnectVerdict(code, withResume)).toBe(verdict);
  });
});
