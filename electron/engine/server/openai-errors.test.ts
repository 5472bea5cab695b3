import { describe, expect, it } from 'vitest';
import { KiwiError } from '../errors.js';
import { toOpenAiError } from './openai-errors.js';

describe('the error -> HTTP table', () => {
  it('answers a member\'s malformed or non-finite ring data and a failed stage with 502, not a client error', () => {
    for (const [code, openai] of [['RING_PEER_MALFORMED', 'ring_member_malformed'], ['RING_PEER_NUMERIC', 'ring_member_numeric'], ['RING_STAGE_FAILED', 'ring_stage_failed']] as const) {
      const { status, body } = toOpenAiError(new KiwiError(code, 'a member sent NaN'));
      expect(status).toBe(502);
      expect(body.error).toMatchObject({ type: 'server_error', code: openai, message: 'a member sent NaN' });
    }
    expect(toOpenAiError(new KiwiError('CONTEXT_EXCEEDED', 'too long')).status).toBe(400);
  });
});
