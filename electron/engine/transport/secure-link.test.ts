import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { createMemoryLinkPair } from './link.js';
import type { LinkClose } from './link.js';
import { openSecureLink } from './secure-link.js';

async function securePair(encrypt = true) {
  const [a, b] = createMemoryLinkPair();
  const secret = { secret: randomBytes(32), context: 'unit' };
  const [sa, sb] = await Promise.all([
    openSecureLink(a, { role: 'initiator', secret, encrypt, timeoutMs: 2000 }),
    openSecureLink(b, { role: 'responder', secret, encrypt, timeoutMs: 2000 }),
  ]);
  return { a, b, sa, sb };
}

describe('secure link', () => {
  it('reports the peer\'s protocol error code when it closes the link', async () => {
    const { a, sa, sb } = await securePair();
    const seenByA = new Promise<LinkClose>((resolve) => sa.onClose(resolve));
    // Garbage from "a" makes "b" abort with FRAME_BAD_MAGIC and tell "a" why.
    a.send(Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8));
    const info = await seenByA;
    expect(isKiwiError(info.error, 'LINK_PEER_ERROR')).toBe(true);
    expect(info.reason).toContain('FRAME_BAD_MAGIC');
    void sb;
  });

  it('times out a handshake the peer never answers', async () => {
    const [a] = createMemoryLinkPair();
    await expect(openSecureLink(a, { role: 'initiator', secret: { secret: randomBytes(32), context: 'x' }, timeoutMs: 50 })).rejects.toMatchObject({ code: 'LINK_TIMEOUT' });
  });

  it('refuses a responder that wants encryption when the initiator does not', async () => {
    const [a, b] = createMemoryLinkPair();
    const secret = { secret: randomBytes(32), context: 'x' };
    const [ra, rb] = await Promise.allSettled([
      openSecureLink(a, { role: 'initiator', secret, encrypt: false, timeoutMs: 1000 }),
      openSecureLink(b, { role: 'responder', secret, encrypt: true, timeoutMs: 1000 }),
    ]);
    expect(rb.status === 'rejected' && isKiwiError(rb.reason, 'LINK_HANDSHAKE_FAILED')).toBe(true);
    expect(ra.status).toBe('rejected');
  });

  it('refuses an initiator whose link id the responder does not know', async () => {
    const [a, b] = createMemoryLinkPair();
    const [, rb] = await Promise.allSettled([
      openSecureLink(a, { role: 'initiator', secret: { secret: randomBytes(32), context: 'x' }, linkId: Uint8Array.of(9), timeoutMs: 1000 }),
      openSecureLink(b, { role: 'responder', resolveSecret: () => undefined, timeoutMs: 1000 }),
    ]);
    expect(rb.status === 'rejected' && isKiwiError(rb.reason, 'LINK_UNKNOWN')).toBe(true);
  });

  it('closes with a clear code, and never throws, on any bytes after the handshake (fuzz)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ minLength: 1, maxLength: 64 }), { minLength: 1, maxLength: 4 }), async (chunks) => {
        const { a, sb } = await securePair();
        const closed = new Promise<LinkClose>((resolve) => sb.onClose(resolve));
        for (const c of chunks) if (!a.closed) a.send(c);
        a.close('fuzz over');
        const info = await closed;
        if (info.error !== undefined) expect(info.error.code).toMatch(/^(FRAME_|CHANNEL_|LINK_)/);
      }),
      { numRuns: 60 },
    );
  });

  it('carries data unencrypted only when both sides asked for that (benchmarks)', async () => {
    const { sa, sb } = await securePair(false);
    expect(sa.encrypted).toBe(false);
    const got = new Promise<Uint8Array>((resolve) => sb.onMessage(resolve));
    sa.send(Uint8Array.of(5));
    expect([...(await got)]).toEqual([5]);
  });
});
