// The transport compliance suite (after js-libp2p's): every kind of Link (memory, direct
// WebSocket, relayed through the rendezvous) must pass the same tests, raw and under secure-link.
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { isKiwiError, type KiwiError } from '../errors.js';
import { encodeFrame, FrameType } from '../transport/frame-codec.js';
import type { Link, LinkClose } from '../transport/link.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';

export interface LinkPair {
  a: Link;
  b: Link;
  /** Every byte `a` puts on the wire, as the network (or the relay) sees it. */
  wire: Uint8Array[];
  /** For relayed links: every payload as the rendezvous saw it (its debug hook). */
  relayView?: Uint8Array[];
  cleanup(): Promise<void>;
}

export type MakeLinkPair = () => Promise<LinkPair>;

/** The next n messages on a raw link (onData) or a secure link (onMessage). */
function nextMessages(link: Link | SecureLink, n: number): Promise<Uint8Array[]> {
  return new Promise((resolve) => {
    const got: Uint8Array[] = [];
    const take = (m: Uint8Array): void => {
      got.push(m);
      if (got.length === n) resolve(got);
    };
    if ('onMessage' in link) link.onMessage(take);
    else link.onData(take);
  });
}

function closed(link: { onClose(l: (i: LinkClose) => void): void }): Promise<LinkClose> {
  return new Promise((resolve) => link.onClose(resolve));
}

/** Wraps `link` so that what it sends is also recorded in `wire`. */
export function tap(link: Link, wire: Uint8Array[]): Link {
  const send = link.send.bind(link);
  link.send = (bytes: Uint8Array): void => {
    wire.push(bytes.slice());
    send(bytes);
  };
  return link;
}

async function securePair(pair: LinkPair, secretB?: Uint8Array): Promise<[SecureLink, SecureLink]> {
  const secret = randomBytes(32);
  const context = 'compliance';
  return Promise.all([
    openSecureLink(pair.a, { role: 'initiator', secret: { secret, context }, linkId: Uint8Array.of(1, 2, 3), timeoutMs: 5000 }),
    openSecureLink(pair.b, { role: 'responder', resolveSecret: () => ({ secret: secretB ?? secret, context }), timeoutMs: 5000 }),
  ]);
}

export function describeLinkCompliance(name: string, makePair: MakeLinkPair): void {
  describe(`${name} link compliance`, () => {
    let pair: LinkPair | undefined;
    const open = async (): Promise<LinkPair> => {
      pair = await makePair();
      return pair;
    };
    afterEach(async () => {
      await pair?.cleanup();
      pair = undefined;
    });

    it('delivers messages in order in both directions', async () => {
      const { a, b } = await open();
      const toB = nextMessages(b, 50);
      const toA = nextMessages(a, 50);
      for (let i = 0; i < 50; i++) {
        a.send(Uint8Array.of(i, i + 1));
        b.send(Uint8Array.of(100 + i));
      }
      expect((await toB).map((m) => m[0])).toEqual([...Array(50).keys()]);
      expect((await toA).map((m) => m[0])).toEqual([...Array(50).keys()].map((i) => 100 + i));
    });

    it('carries an empty message and a 1 MiB message intact', async () => {
      const { a, b } = await open();
      const big = randomBytes(1024 * 1024);
      const got = nextMessages(b, 2);
      a.send(new Uint8Array(0));
      a.send(big);
      const [empty, large] = await got;
      expect(empty?.length).toBe(0);
      expect(Buffer.from(large as Uint8Array).equals(big)).toBe(true);
    });

    it('tells the other end when one end closes, and refuses sends afterwards', async () => {
      const { a, b } = await open();
      const seen = closed(b);
      a.close('done');
      expect((await seen).by).toBe('remote');
      expect(() => a.send(Uint8Array.of(1))).toThrow(expect.objectContaining({ code: 'LINK_CLOSED' }));
    });

    it('runs an encrypted, authenticated channel whose wire bytes hide the plaintext', async () => {
      const p = await open();
      tap(p.a, p.wire);
      const [sa, sb] = await securePair(p);
      const secretText = Buffer.from('activations of layer 7: 0.125 0.25 0.5');
      const got = nextMessages(sb, 1);
      sa.send(secretText);
      expect(Buffer.from((await got)[0] as Uint8Array).equals(secretText)).toBe(true);
      expect(p.wire.length).toBeGreaterThan(0);
      for (const chunk of [...p.wire, ...(p.relayView ?? [])]) expect(Buffer.from(chunk).includes(secretText)).toBe(false);
      if (p.relayView !== undefined) expect(p.relayView.length).toBeGreaterThan(0);
    });

    it('measures a round-trip time', async () => {
      const p = await open();
      const [sa, sb] = await securePair(p);
      const rttMs = await sa.ping();
      expect(rttMs).toBeGreaterThanOrEqual(0);
      expect(Number.isFinite(rttMs)).toBe(true);
      expect(await sb.ping()).toBeGreaterThanOrEqual(0);
    });

    it('refuses a peer with another secret on both sides', async () => {
      const p = await open();
      const [ra, rb] = await Promise.allSettled([
        openSecureLink(p.a, { role: 'initiator', secret: { secret: randomBytes(32), context: 'x' }, timeoutMs: 3000 }),
        openSecureLink(p.b, { role: 'responder', secret: { secret: randomBytes(32), context: 'x' }, timeoutMs: 3000 }),
      ]);
      expect(ra.status === 'rejected' && isKiwiError(ra.reason, 'LINK_AUTH_FAILED')).toBe(true);
      expect(rb.status === 'rejected' && isKiwiError(rb.reason, 'LINK_AUTH_FAILED')).toBe(true);
    });

    it('closes the secure link with CHANNEL_REPLAY when a recorded record is replayed', async () => {
      const p = await open();
      tap(p.a, p.wire);
      const [sa, sb] = await securePair(p);
      const got = nextMessages(sb, 1);
      sa.send(Buffer.from('pay once'));
      await got;
      const seen = closed(sb);
      // The attacker (or a buggy relay) re-sends the last record the initiator put on the wire.
      const recorded = p.wire.at(-1) as Uint8Array;
      p.a.send(recorded);
      const info = await seen;
      expect((info.error as KiwiError | undefined)?.code).toBe('CHANNEL_REPLAY');
    });

    it('closes the secure link with a frame error on garbage, without throwing', async () => {
      const p = await open();
      const [, sb] = await securePair(p);
      const seen = closed(sb);
      p.a.send(Uint8Array.of(0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0));
      const info = await seen;
      expect(isKiwiError(info.error, 'FRAME_BAD_MAGIC')).toBe(true);
    });

    it('closes the secure link when the peer sends an unsealed data frame', async () => {
      const p = await open();
      const [, sb] = await securePair(p);
      const seen = closed(sb);
      p.a.send(encodeFrame({ type: FrameType.DATA, flags: 0, payload: Uint8Array.of(1) }));
      expect(isKiwiError((await seen).error, 'CHANNEL_NOT_SEALED')).toBe(true);
    });
  });
}
