import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { encodeRelay, type ServerMessage } from './protocol.js';
import { CloseCode, RendezvousCore, sourceOf, type CoreConnection, type RendezvousLimits } from './rendezvous-core.js';

class FakeConn implements CoreConnection {
  texts: ServerMessage[] = [];
  binaries: Uint8Array[] = [];
  closedWith: number | undefined;
  bufferedAmount = 0;
  constructor(readonly remoteAddress = '127.0.0.1') {}
  sendText(text: string): void {
    this.texts.push(JSON.parse(text) as ServerMessage);
  }
  sendBinary(bytes: Uint8Array): void {
    this.binaries.push(bytes);
  }
  close(code: number): void {
    this.closedWith ??= code;
  }
  last(): ServerMessage | undefined {
    return this.texts.at(-1);
  }
  errors(): string[] {
    return this.texts.flatMap((m) => (m.t === 'error' ? [m.code] : []));
  }
}

function setup(limits: Partial<RendezvousLimits> = {}, now = () => 0) {
  const core = new RendezvousCore({ limits, now, random: () => 41 });
  const connect = (ip?: string): FakeConn => {
    const c = new FakeConn(ip);
    core.connected(c);
    return c;
  };
  const say = (c: FakeConn, msg: unknown): void => core.text(c, JSON.stringify(msg));
  const host = connect();
  say(host, { t: 'open', v: 1 });
  const opened = host.last();
  if (opened?.t !== 'opened') throw new Error('open failed');
  const claim = (ip?: string): FakeConn => {
    const c = connect(ip);
    say(c, { t: 'claim', v: 1, nameplate: opened.nameplate });
    return c;
  };
  return { core, connect, say, host, nameplate: opened.nameplate, claim };
}

const peerOf = (c: FakeConn): number => {
  const m = c.texts.find((x) => x.t === 'claimed');
  if (m?.t !== 'claimed') throw new Error('not claimed');
  return m.peer;
};

describe('rendezvous core', () => {
  it('allocates a three-digit nameplate and tells the host who claims it', () => {
    const { host, nameplate, claim } = setup();
    expect(nameplate).toBe(141);
    const m = claim();
    expect(m.last()).toEqual({ t: 'claimed', nameplate: 141, peer: 1 });
    expect(host.last()).toEqual({ t: 'peer-joined', peer: 1 });
  });

  it('passes PAKE messages between a claimant and the host, and nowhere else', () => {
    const { host, claim, say } = setup();
    const a = claim();
    const b = claim();
    say(a, { t: 'send', to: 0, body: { kind: 'pake', msg: 'AAAA' } });
    expect(host.last()).toEqual({ t: 'from', from: 1, body: { kind: 'pake', msg: 'AAAA' } });
    say(a, { t: 'send', to: peerOf(b), body: { x: 1 } });
    expect(a.errors()).toEqual(['RENDEZVOUS_NOT_ADMITTED']);
    expect(b.texts.some((t) => t.t === 'from')).toBe(false);
  });

  it('relays binary frames between admitted peers only, naming the source', () => {
    const { core, host, claim, say } = setup();
    const a = claim();
    const b = claim();
    core.binary(a, encodeRelay(2, 1, Uint8Array.of(9, 9)));
    core.binary(a, encodeRelay(0, 0, Uint8Array.of(9, 9)));
    core.binary(host, encodeRelay(1, 0, Uint8Array.of(9, 9)));
    expect(a.errors()).toEqual(['RENDEZVOUS_NOT_ADMITTED', 'RENDEZVOUS_NOT_ADMITTED']);
    expect(host.errors()).toEqual(['RENDEZVOUS_NOT_ADMITTED']);
    expect(host.binaries).toEqual([]);
    say(host, { t: 'admit', peer: 1 });
    say(host, { t: 'admit', peer: 2 });
    expect(a.texts).toContainEqual({ t: 'admitted' });
    core.binary(a, encodeRelay(2, 1, Uint8Array.of(7, 8)));
    expect(b.binaries).toEqual([encodeRelay(1, 1, Uint8Array.of(7, 8))]);
    core.binary(host, encodeRelay(1, 0, Uint8Array.of(5)));
    expect(a.binaries).toEqual([encodeRelay(0, 0, Uint8Array.of(5))]);
  });

  it('refuses further claims from an address after its repeated wrong codes, not from others', () => {
    const { host, claim, say } = setup({ maxFailedAttempts: 3 });
    for (let i = 1; i <= 3; i++) {
      const c = claim('10.0.0.66');
      say(host, { t: 'reject', peer: i });
      expect(c.closedWith).toBe(CloseCode.REJECTED);
    }
    const late = claim('10.0.0.66');
    expect(late.errors()).toEqual(['NAMEPLATE_CLOSED']);
    expect(host.texts.some((t) => t.t === 'nameplate-closed')).toBe(false);
    expect(claim('10.0.0.7').last()).toMatchObject({ t: 'claimed' });
  });

  it('closes the nameplate to code claims after the total of wrong codes from everywhere', () => {
    const { host, claim, say } = setup({ maxFailedAttempts: 3, maxFailedAttemptsTotal: 4 });
    for (let i = 1; i <= 4; i++) {
      claim(`10.0.1.${i}`);
      say(host, { t: 'reject', peer: i });
    }
    expect(host.texts.some((t) => t.t === 'nameplate-closed')).toBe(true);
    expect(claim('10.0.2.1').errors()).toEqual(['NAMEPLATE_CLOSED']);
  });

  it('counts a claimant that guessed and left before admission as a failed attempt, one that never guessed not', () => {
    const { core, say, claim } = setup({ maxFailedAttempts: 2 });
    for (let i = 0; i < 10; i++) core.disconnected(claim());
    expect(claim().last()).toMatchObject({ t: 'claimed' });
    for (let i = 0; i < 2; i++) {
      const c = claim('10.0.0.5');
      say(c, { t: 'send', to: 0, body: { kind: 'pake', msg: 'AAAA' } });
      core.disconnected(c);
    }
    expect(claim('10.0.0.5').errors()).toEqual(['NAMEPLATE_CLOSED']);
  });

  it('does not let parallel claims from one address exceed its failure budget', () => {
    const { claim } = setup({ maxFailedAttempts: 2 });
    claim();
    claim();
    expect(claim().errors()).toEqual(['NAMEPLATE_BUSY']);
    expect(claim('10.0.0.8').last()).toMatchObject({ t: 'claimed' });
  });

  it('lets strangers burn no session: code-less and wrong-code floods from many connections, then the friends still join and an approved member rejoins', () => {
    const { core, host, say, claim, nameplate } = setup();
    // One approved member from a LAN address; then an attacker floods from another address.
    const friend = claim('192.168.1.20');
    say(host, { t: 'admit', peer: peerOf(friend) });
    const attacker = '203.0.113.9';
    let refused = 0;
    for (let i = 0; i < 200; i++) {
      const c = claim(attacker);
      const claimed = c.texts.find((t) => t.t === 'claimed');
      if (claimed?.t !== 'claimed') {
        refused++;
        core.disconnected(c);
        continue;
      }
      // Half of them send a wrong guess (the host rejects it), half say nothing and leave.
      if (i % 2 === 0) {
        say(c, { t: 'send', to: 0, body: { kind: 'pake', msg: 'AAAA' } });
        say(host, { t: 'reject', peer: claimed.peer });
      }
      core.disconnected(c);
    }
    expect(refused).toBeGreaterThan(150);
    // Enumeration of other nameplates from the attacker's address is slowed to a trickle.
    const probe = (n: number): string[] => {
      const c = core.connected.bind(core);
      const conn = new (friend.constructor as new (ip: string) => typeof friend)(attacker);
      c(conn);
      say(conn, { t: 'claim', v: 1, nameplate: n });
      core.disconnected(conn);
      return conn.errors();
    };
    const probes = Array.from({ length: 40 }, (_, i) => probe(1000 + i)).flat();
    expect(probes.filter((c) => c === 'RENDEZVOUS_RATE_LIMITED').length).toBeGreaterThanOrEqual(20);
    expect(host.texts.some((t) => t.t === 'nameplate-closed')).toBe(false);
    // A new friend from another address joins with the code; the approved member rejoins after a drop.
    const newFriend = claim('192.168.1.21');
    expect(newFriend.last()).toMatchObject({ t: 'claimed', nameplate });
    core.disconnected(friend);
    const back = new (friend.constructor as new (ip: string) => typeof friend)('192.168.1.20');
    core.connected(back);
    say(back, { t: 'claim', v: 1, nameplate, rejoin: true });
    expect(back.last()).toMatchObject({ t: 'claimed' });
    expect(host.texts.at(-1)).toMatchObject({ t: 'peer-joined', rejoin: true });
  });

  it('lets a returning member claim through a nameplate closed to code guesses', () => {
    const { core, connect, host, say, claim, nameplate } = setup({ maxFailedAttemptsTotal: 2, maxFailedAttempts: 1 });
    for (const ip of ['10.9.0.1', '10.9.0.2']) {
      const c = claim(ip);
      say(host, { t: 'reject', peer: peerOf(c) });
    }
    expect(host.texts.some((t) => t.t === 'nameplate-closed')).toBe(true);
    expect(claim('10.9.0.3').errors()).toEqual(['NAMEPLATE_CLOSED']);
    const back = connect('10.9.0.4');
    say(back, { t: 'claim', v: 1, nameplate, rejoin: true });
    expect(back.last()).toMatchObject({ t: 'claimed' });
    expect(core.stats().nameplates).toBe(1);
  });

  it.each([
    ['203.0.113.9', '203.0.113.9'],
    ['::ffff:203.0.113.9', '203.0.113.9'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2::9', '2001:db8:1:2::/64'],
    ['::1', '0:0:0:0::/64'],
  ])('counts %s as the source %s', (ip, source) => {
    expect(sourceOf(ip)).toBe(source);
  });

  it('keeps admitted members working after the nameplate closes', () => {
    const { core, host, claim, say } = setup({ maxFailedAttempts: 1, maxFailedAttemptsTotal: 1 });
    const a = claim();
    say(host, { t: 'admit', peer: 1 });
    const bad = claim();
    say(host, { t: 'reject', peer: peerOf(bad) });
    expect(host.texts.some((t) => t.t === 'nameplate-closed')).toBe(true);
    core.binary(host, encodeRelay(1, 0, Uint8Array.of(1)));
    expect(a.binaries).toHaveLength(1);
    expect(a.closedWith).toBeUndefined();
  });

  it.each([
    ['not JSON', 'hello', 'RENDEZVOUS_MALFORMED'],
    ['an unknown type', JSON.stringify({ t: 'explode' }), 'RENDEZVOUS_MALFORMED'],
    ['an extra field', JSON.stringify({ t: 'open', v: 1, admin: true }), 'RENDEZVOUS_MALFORMED'],
    ['a wrong protocol version', JSON.stringify({ t: 'claim', v: 2, nameplate: 42 }), 'RENDEZVOUS_MALFORMED'],
    ['a nameplate out of range', JSON.stringify({ t: 'claim', v: 1, nameplate: 1e9 }), 'RENDEZVOUS_MALFORMED'],
    ['an unknown nameplate', JSON.stringify({ t: 'claim', v: 1, nameplate: 43 }), 'NAMEPLATE_UNKNOWN'],
    ['a send before claiming', JSON.stringify({ t: 'send', to: 0, body: {} }), 'RENDEZVOUS_NOT_BOUND'],
    ['an oversized message', JSON.stringify({ t: 'send', to: 0, body: { x: 'y'.repeat(70_000) } }), 'RENDEZVOUS_MESSAGE_TOO_LARGE'],
  ])('refuses %s with a clear error and leaves other sessions alone', (_what, text, code) => {
    const { core, connect, host, claim, say } = setup();
    const member = claim();
    say(host, { t: 'admit', peer: 1 });
    const bad = connect('10.0.0.9');
    core.text(bad, text);
    expect(bad.errors()).toEqual([code]);
    core.binary(host, encodeRelay(1, 1, Uint8Array.of(1, 2, 3)));
    expect(member.binaries).toHaveLength(1);
    expect(member.errors()).toEqual([]);
  });

  it('refuses a replayed claim and a replayed admit', () => {
    const { host, claim, say, nameplate } = setup();
    const a = claim();
    say(a, { t: 'claim', v: 1, nameplate });
    expect(a.errors()).toEqual(['RENDEZVOUS_ALREADY_BOUND']);
    say(host, { t: 'admit', peer: 1 });
    say(host, { t: 'admit', peer: 1 });
    expect(host.errors()).toEqual(['RENDEZVOUS_ALREADY_ADMITTED']);
    say(a, { t: 'admit', peer: 1 });
    expect(a.errors()).toContain('RENDEZVOUS_NOT_HOST');
  });

  it('refuses malformed relay frames', () => {
    const { core, host, claim, say } = setup();
    claim();
    say(host, { t: 'admit', peer: 1 });
    core.binary(host, Uint8Array.of(0, 0));
    core.binary(host, encodeRelay(1, 7, Uint8Array.of(1)));
    core.binary(host, encodeRelay(99, 0, Uint8Array.of(1)));
    core.binary(host, encodeRelay(0, 0, Uint8Array.of(1)));
    expect(host.errors()).toEqual(['RELAY_MALFORMED', 'RELAY_MALFORMED', 'RENDEZVOUS_NO_PEER', 'RENDEZVOUS_NO_PEER']);
  });

  it('does not count sending to a peer that just left as a violation', () => {
    const { core, host, claim, say } = setup({ maxViolations: 3 });
    claim();
    say(host, { t: 'admit', peer: 1 });
    for (let i = 0; i < 10; i++) core.binary(host, encodeRelay(42, 0, Uint8Array.of(1)));
    expect(host.errors()).toEqual(Array.from({ length: 10 }, () => 'RENDEZVOUS_NO_PEER'));
    expect(host.closedWith).toBeUndefined();
  });

  it('closes a connection after too many violations', () => {
    const { core, connect } = setup({ maxViolations: 3 });
    const bad = connect('10.0.0.2');
    for (let i = 0; i < 3; i++) core.text(bad, '{');
    expect(bad.closedWith).toBe(CloseCode.VIOLATIONS);
  });

  it('rate-limits a flooding client and recovers as time passes', () => {
    let t = 0;
    const { core, connect } = setup({ messagesPerSecond: 10, messageBurst: 5, maxViolations: 1000 }, () => t);
    const c = connect('10.0.0.3');
    for (let i = 0; i < 8; i++) core.text(c, JSON.stringify({ t: 'send', to: 0, body: {} }));
    expect(c.errors().filter((e) => e === 'RENDEZVOUS_RATE_LIMITED')).toHaveLength(3);
    t += 1000;
    core.text(c, JSON.stringify({ t: 'send', to: 0, body: {} }));
    expect(c.errors().at(-1)).toBe('RENDEZVOUS_NOT_BOUND');
  });

  it('limits sessions and connections per address', () => {
    const { core, connect, say } = setup({ maxSessionsPerIp: 2, maxConnectionsPerIp: 3 });
    const second = connect();
    say(second, { t: 'open', v: 1 });
    const third = connect();
    expect(third.closedWith).toBeUndefined();
    say(third, { t: 'open', v: 1 });
    expect(third.errors()).toEqual(['RENDEZVOUS_TOO_MANY_SESSIONS']);
    expect(connect().closedWith).toBe(CloseCode.TOO_MANY_CONNECTIONS);
    expect(core.stats().nameplates).toBe(2);
  });

  it('closes the session for everyone when the host leaves', () => {
    const { core, host, claim, say } = setup();
    const a = claim();
    say(host, { t: 'admit', peer: 1 });
    core.disconnected(host);
    expect(a.texts.at(-1)).toEqual({ t: 'nameplate-closed', reason: 'the host left the session' });
    expect(core.stats().nameplates).toBe(0);
  });

  it('tells members who left', () => {
    const { core, host, claim, say } = setup();
    const a = claim();
    const b = claim();
    say(host, { t: 'admit', peer: 1 });
    say(host, { t: 'admit', peer: 2 });
    core.disconnected(b);
    expect(host.last()).toEqual({ t: 'peer-left', peer: 2 });
    expect(a.last()).toEqual({ t: 'peer-left', peer: 2 });
  });

  it('survives arbitrary text and binary input without throwing (fuzz)', () => {
    const { core, connect, host, claim, say } = setup({ maxViolations: 1_000_000, messageBurst: 1e9 });
    const member = claim();
    say(host, { t: 'admit', peer: 1 });
    const attacker = connect('10.9.9.9');
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 200 }), fc.json({ maxDepth: 3 })), fc.uint8Array({ maxLength: 40 }), (text, bytes) => {
        core.text(attacker, text);
        core.binary(attacker, bytes);
      }),
      { numRuns: 1000 },
    );
    core.binary(host, encodeRelay(1, 1, Uint8Array.of(1)));
    expect(member.binaries).toHaveLength(1);
  });
});
