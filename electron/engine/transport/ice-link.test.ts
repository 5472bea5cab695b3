import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { describeLinkCompliance } from '../test-support/link-compliance.js';
import { IcePeer, type IceLink, type IceSignal } from './ice-link.js';

const MAX = 17 * 1024 * 1024;

/** Two IcePeers whose signals cross over (asynchronously, as through a control channel). */
function icePair(opts: { timeoutMs?: number; drop?: (s: IceSignal) => boolean } = {}): { a: IcePeer; b: IcePeer; signals: IceSignal[] } {
  const signals: IceSignal[] = [];
  const wire = (to: () => IcePeer) => (s: IceSignal): void => {
    signals.push(s);
    if (opts.drop?.(s) === true) return;
    setImmediate(() => to().signal(s));
  };
  const a: IcePeer = new IcePeer({ role: 'initiator', sendSignal: wire(() => b), maxMessageBytes: MAX, timeoutMs: opts.timeoutMs ?? 10_000 });
  const b: IcePeer = new IcePeer({ role: 'responder', sendSignal: wire(() => a), maxMessageBytes: MAX, timeoutMs: opts.timeoutMs ?? 10_000 });
  return { a, b, signals };
}

describeLinkCompliance('ICE data channel', async () => {
  const { a, b } = icePair();
  const [la, lb] = await Promise.all([a.link, b.link]);
  return {
    a: la, b: lb, wire: [],
    cleanup: async () => {
      la.close();
      lb.close();
    },
  };
});

describe('IcePeer', () => {
  it('opens a direct-udp link over a host candidate pair and carries 16 MiB in chunks', async () => {
    const { a, b, signals } = icePair();
    const [la, lb] = await Promise.all([a.link, b.link]);
    expect(la.kind).toBe('direct-udp');
    expect(signals.some((s) => s.kind === 'offer')).toBe(true);
    expect(signals.some((s) => s.kind === 'answer')).toBe(true);
    expect(la.route()?.local.type).toBe('host');
    const big = randomBytes(16 * 1024 * 1024);
    const got = new Promise<Uint8Array>((resolve) => lb.onData(resolve));
    la.send(big);
    expect(Buffer.from(await got).equals(big)).toBe(true);
    la.close();
    lb.close();
  });

  it('closes the link with LINK_OVERFLOW when a message exceeds the limit', async () => {
    const small: IceSignal[] = [];
    let b: IcePeer | undefined;
    const a = new IcePeer({ role: 'initiator', sendSignal: (s) => setImmediate(() => b?.signal(s)), maxMessageBytes: MAX });
    b = new IcePeer({ role: 'responder', sendSignal: (s) => { small.push(s); setImmediate(() => a.signal(s)); }, maxMessageBytes: 1000 });
    const [la, lb] = await Promise.all([a.link, b.link]);
    const closed = new Promise<IceLink['closed']>((resolve) => lb.onClose((info) => resolve(isKiwiError(info.error, 'LINK_OVERFLOW'))));
    la.send(new Uint8Array(5000));
    expect(await closed).toBe(true);
    la.close();
  });

  it('fails with ICE_UNAVAILABLE at once when the other side refuses ICE', async () => {
    const a = new IcePeer({ role: 'initiator', sendSignal: () => setImmediate(() => a.signal({ kind: 'unavailable' })), maxMessageBytes: MAX, timeoutMs: 60_000 });
    await expect(a.link).rejects.toMatchObject({ code: 'ICE_UNAVAILABLE' });
  });

  it('fails with ICE_FAILED when no candidate reaches the other side', async () => {
    // Descriptions cross, candidates are lost: no pair can be checked.
    const { a, b } = icePair({ timeoutMs: 1500, drop: (s) => s.kind === 'candidate' });
    const [ra, rb] = await Promise.allSettled([a.link, b.link]);
    expect(ra.status === 'rejected' && isKiwiError(ra.reason, 'ICE_FAILED')).toBe(true);
    expect(rb.status === 'rejected' && isKiwiError(rb.reason, 'ICE_FAILED')).toBe(true);
  });

  it('fails a garbage description as ICE_FAILED without throwing', async () => {
    const a = new IcePeer({ role: 'initiator', sendSignal: () => undefined, maxMessageBytes: MAX });
    a.signal({ kind: 'answer', sdp: 'not an sdp' });
    await expect(a.link).rejects.toMatchObject({ code: 'ICE_FAILED' });
  });
});
