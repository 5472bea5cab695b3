import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { decodeControl, encodeControl, HostToMember, MemberToHost, PakeBody, parseBody } from './session-messages.js';

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

describe('session messages', () => {
  it('round-trips a hello', () => {
    const hello: MemberToHost = {
      type: 'hello', memberId: 'abcdefgh12', name: 'ada', publicKey: Buffer.alloc(32, 1).toString('base64'), signature: Buffer.alloc(64, 2).toString('base64'), addresses: ['ws://127.0.0.1:4000'],
    };
    expect(decodeControl(MemberToHost, encodeControl(hello))).toEqual(hello);
  });

  it.each([
    ['not JSON', '{', 'CONTROL_MALFORMED'],
    ['an unknown type', '{"type":"shutdown"}', 'CONTROL_MALFORMED'],
    ['an extra field', '{"type":"heartbeat","admin":true}', 'CONTROL_MALFORMED'],
    ['a short member id', '{"type":"hello","memberId":"x","name":"a","addresses":[]}', 'CONTROL_MALFORMED'],
    ['a non-ws address', '{"type":"hello","memberId":"abcdefgh","name":"a","addresses":["http://x"]}', 'CONTROL_MALFORMED'],
    ['too many addresses', JSON.stringify({ type: 'hello', memberId: 'abcdefgh', name: 'a', addresses: Array(9).fill('ws://a:1') }), 'CONTROL_MALFORMED'],
    ['a negative RTT', '{"type":"link-status","peer":1,"kind":"direct","rttMs":-1}', 'CONTROL_MALFORMED'],
    ['an oversized message', JSON.stringify({ type: 'capabilities', capabilities: { x: 'y'.repeat(70_000) } }), 'CONTROL_TOO_LARGE'],
  ])('refuses %s', (_what, text, code) => {
    expect(() => decodeControl(MemberToHost, utf8(text))).toThrow(expect.objectContaining({ code }));
  });

  it('refuses a link key that is not base64', () => {
    const bad = { type: 'link', peer: 1, linkId: 'not base64!', secret: 'AAAA', role: 'initiator', addresses: [] };
    expect(() => decodeControl(HostToMember, utf8(JSON.stringify(bad)))).toThrow(expect.objectContaining({ code: 'CONTROL_MALFORMED' }));
  });

  it('refuses an oversized PAKE message', () => {
    expect(() => parseBody(PakeBody, { kind: 'pake', msg: 'A'.repeat(200) })).toThrow(expect.objectContaining({ code: 'PAKE_INVALID_MESSAGE' }));
  });

  it('never throws anything but a Kiwi error on arbitrary input (fuzz)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 300 }), fc.json({ maxDepth: 4 })), (text) => {
        for (const decode of [() => decodeControl(MemberToHost, utf8(text)), () => decodeControl(HostToMember, utf8(text))]) {
          try {
            decode();
          } catch (err) {
            expect(isKiwiError(err)).toBe(true);
          }
        }
        try {
          parseBody(PakeBody, JSON.parse(text) as unknown);
        } catch (err) {
          if (!(err instanceof SyntaxError)) expect(isKiwiError(err, 'PAKE_INVALID_MESSAGE')).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
