import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { decodeFrame, FrameType } from './frame-codec.js';
import { deriveChannelKeys, SEAL_OVERHEAD_BYTES, SecureChannel } from './secure-channel.js';

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

function pair(secretB?: Uint8Array): { a: SecureChannel; b: SecureChannel } {
  const secret = randomBytes(32);
  const ni = randomBytes(32);
  const nr = randomBytes(32);
  return {
    a: new SecureChannel(deriveChannelKeys(secret, 'initiator', ni, nr, 'test')),
    b: new SecureChannel(deriveChannelKeys(secretB ?? secret, 'responder', ni, nr, 'test')),
  };
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    if (isKiwiError(err)) return err.code;
    throw err;
  }
  return undefined;
}

describe('secure channel', () => {
  it('carries records both ways', () => {
    const { a, b } = pair();
    expect(b.open(decodeFrame(a.seal(FrameType.DATA, utf8('hello'))))).toEqual(utf8('hello'));
    expect(a.open(decodeFrame(b.seal(FrameType.DATA, utf8('back'))))).toEqual(utf8('back'));
    expect(b.open(decodeFrame(a.seal(FrameType.PING, new Uint8Array(0))))).toEqual(new Uint8Array(0));
  });

  it('never sends the plaintext and never repeats a ciphertext for the same plaintext', () => {
    const { a } = pair();
    const msg = utf8('the secret activations of layer seven');
    const r1 = a.seal(FrameType.DATA, msg);
    const r2 = a.seal(FrameType.DATA, msg);
    expect(Buffer.from(r1).includes(Buffer.from(msg))).toBe(false);
    expect(Buffer.from(r1.subarray(8)).equals(Buffer.from(r2.subarray(8)))).toBe(false);
    expect(r1.length).toBe(8 + SEAL_OVERHEAD_BYTES + msg.length);
  });

  it('refuses a replayed record', () => {
    const { a, b } = pair();
    const r = a.seal(FrameType.DATA, utf8('once'));
    b.open(decodeFrame(r));
    expect(codeOf(() => b.open(decodeFrame(r)))).toBe('CHANNEL_REPLAY');
  });

  it('refuses records out of order', () => {
    const { a, b } = pair();
    a.seal(FrameType.DATA, utf8('first'));
    const second = a.seal(FrameType.DATA, utf8('second'));
    expect(codeOf(() => b.open(decodeFrame(second)))).toBe('CHANNEL_OUT_OF_ORDER');
  });

  it('refuses a record under a different secret', () => {
    const { a, b } = pair(randomBytes(32));
    expect(codeOf(() => b.open(decodeFrame(a.seal(FrameType.DATA, utf8('x')))))).toBe('CHANNEL_AUTH_FAILED');
  });

  it('refuses a record reflected back to its sender', () => {
    const { a } = pair();
    expect(codeOf(() => a.open(decodeFrame(a.seal(FrameType.DATA, utf8('mirror')))))).toBe('CHANNEL_AUTH_FAILED');
  });

  it('refuses a record whose header type was changed', () => {
    const { a, b } = pair();
    const r = a.seal(FrameType.DATA, utf8('typed'));
    r[2] = FrameType.PING;
    expect(codeOf(() => b.open(decodeFrame(r)))).toBe('CHANNEL_AUTH_FAILED');
  });

  it('refuses a record whose counter was rewritten to look fresh', () => {
    const { a, b } = pair();
    const r = a.seal(FrameType.DATA, utf8('one'));
    b.open(decodeFrame(r));
    const forged = r.slice();
    forged[15] = 1;
    expect(codeOf(() => b.open(decodeFrame(forged)))).toBe('CHANNEL_AUTH_FAILED');
  });

  it('refuses an unsealed frame and a record shorter than its overhead', () => {
    const { b } = pair();
    expect(codeOf(() => b.open({ type: FrameType.DATA, flags: 0, payload: utf8('plain') }))).toBe('CHANNEL_NOT_SEALED');
    expect(codeOf(() => b.open({ type: FrameType.DATA, flags: 1, payload: new Uint8Array(23) }))).toBe('CHANNEL_RECORD_TOO_SHORT');
  });

  it('refuses to seal a message above the link limit', () => {
    const c = new SecureChannel(deriveChannelKeys(randomBytes(32), 'initiator', randomBytes(32), randomBytes(32), 't'), 100);
    expect(codeOf(() => c.seal(FrameType.DATA, new Uint8Array(100 - SEAL_OVERHEAD_BYTES + 1)))).toBe('FRAME_TOO_LARGE');
    expect(() => c.seal(FrameType.DATA, new Uint8Array(100 - SEAL_OVERHEAD_BYTES))).not.toThrow();
  });

  it('refuses every single-bit flip of a record (fuzz)', () => {
    const { a, b } = pair();
    const r = a.seal(FrameType.DATA, utf8('integrity'));
    fc.assert(
      fc.property(fc.integer({ min: 0, max: r.length * 8 - 1 }), (bit) => {
        const forged = r.slice();
        forged[bit >> 3] = (forged[bit >> 3] as number) ^ (1 << (bit & 7));
        const code = codeOf(() => b.open(decodeFrame(forged)));
        expect(code).toMatch(/^(FRAME_|CHANNEL_)/);
      }),
      { numRuns: 400 },
    );
    expect(b.open(decodeFrame(r))).toEqual(utf8('integrity'));
  });

  it('derives different keys for each direction and each connection', () => {
    const secret = randomBytes(32);
    const k1 = deriveChannelKeys(secret, 'initiator', randomBytes(32), randomBytes(32), 'c');
    const k2 = deriveChannelKeys(secret, 'initiator', randomBytes(32), randomBytes(32), 'c');
    expect(Buffer.from(k1.sendKey).equals(Buffer.from(k1.receiveKey))).toBe(false);
    expect(Buffer.from(k1.sendKey).equals(Buffer.from(k2.sendKey))).toBe(false);
  });
});
