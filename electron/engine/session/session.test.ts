import { afterEach, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { startRendezvous } from '../rendezvous/server.js';
import { createHost, type HostSession } from './host.js';
import { findOnLan } from './lan-beacon.js';
import { RendezvousClient } from './rendezvous-client.js';
import { joinSession, MemberSession } from './member.js';
import type { MembershipChange } from './membership.js';
import { parseSessionCode, formatSessionCode } from './session-code.js';
import { waitFor } from '../test-support/wait-for.js';

describe('session (in-process, loopback)', () => {
  let host: HostSession | undefined;
  const members: MemberSession[] = [];
  afterEach(async () => {
    for (const m of members.splice(0)) await m.stop('test over');
    await host?.close();
    host = undefined;
  });

  it('forms a session of a host and three members from the code, with ring links measured', async () => {
    host = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
    const changes: MembershipChange[] = [];
    host.on('change', (c) => changes.push(c));
    for (const name of ['ada', 'bob', 'cy']) {
      members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name, listenHost: '127.0.0.1', heartbeatMs: 200 }));
    }
    expect(changes.filter((c) => c.type === 'member-joined').map((c) => c.name)).toEqual(['ada', 'bob', 'cy']);
    const h = host;
    const status = await waitFor(() => {
      const s = h.status();
      return s.links.length === 4 && s.links.every((l) => l.state === 'up' && l.rttMs !== undefined) ? s : undefined;
    }, 'ring links', 10_000);
    expect(status.ring).toHaveLength(4);
    expect(status.links.every((l) => l.kind === 'direct')).toBe(true);
    // A ring link carries data, encrypted.
    const [ada, bob] = members as [MemberSession, MemberSession];
    const link = ada.ringLink(bob.peer as number);
    const incoming = bob.ringLink(ada.peer as number);
    expect(link).toBeDefined();
    const got = new Promise<Uint8Array>((resolve) => incoming?.onMessage(resolve));
    link?.send(Uint8Array.of(1, 2, 3));
    expect([...(await got)]).toEqual([1, 2, 3]);
  });

  it('falls back to relayed ring links when members have no direct listener', async () => {
    host = await createHost({ autoApprove: true });
    for (const name of ['ada', 'bob']) members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name }));
    const h = host;
    const status = await waitFor(() => {
      const s = h.status();
      return s.links.length === 3 && s.links.every((l) => l.state === 'up' && l.rttMs !== undefined) ? s : undefined;
    }, 'relayed ring links', 10_000);
    expect(status.links.every((l) => l.kind === 'relayed')).toBe(true);
  });

  it('refuses a wrong code and, after repeated failures from one address, refuses that address', async () => {
    host = await createHost({ autoApprove: true });
    const code = parseSessionCode(host.code);
    const wrong = formatSessionCode({ ...code, words: [code.words[0] === 'apple' ? 'lemon' : 'apple', ...code.words.slice(1)] });
    const failures: number[] = [];
    host.on('pake-failed', (peer) => failures.push(peer));
    const codes: string[] = [];
    for (let i = 0; i < 6; i++) {
      try {
        await joinSession({ code: wrong, rendezvousUrl: host.rendezvousUrl, name: 'mallory', reconnect: false });
        throw new Error('a wrong code was accepted');
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        codes.push(err.code);
      }
      // Each failure must be counted before the next try, as a real attacker's would be.
      await waitFor(() => failures.length >= Math.min(i + 1, 5) || codes.at(-1) !== 'PAKE_CONFIRMATION_FAILED', 'failure count', 5000);
    }
    expect(codes.slice(0, 5)).toEqual(Array(5).fill('PAKE_CONFIRMATION_FAILED'));
    expect(codes[5]).toBe('NAMEPLATE_CLOSED');
    await expect(joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'late' })).rejects.toMatchObject({ code: 'NAMEPLATE_CLOSED' });
  });

  it('soft- then hard-evicts a silent member, which can rejoin with its identity', async () => {
    host = await createHost({ autoApprove: true, softEvictMs: 300, hardEvictMs: 900 });
    const changes: string[] = [];
    host.on('change', (c) => changes.push(`${c.type}${'reason' in c ? `:${c.reason}` : ''}`));
    const m = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'zed', heartbeatMs: 100, reconnect: false });
    const id = m.memberId;
    await m.stop('simulated crash');
    await waitFor(() => changes.includes('member-left:hard-evicted'), 'hard eviction', 5000);
    expect(changes).toEqual(['member-joined', 'member-left:soft-evicted', 'member-left:hard-evicted']);
    const again = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'zed', identity: m.identity, memberId: id, heartbeatMs: 100 });
    members.push(again);
    expect(changes.at(-1)).toBe('member-joined');
    expect(host.status().members.find((x) => x.memberId === id)?.state).toBe('active');
  });

  it('waits for the host to approve when not auto-approving', async () => {
    host = await createHost({ autoApprove: false });
    const h = host;
    h.on('change', (c) => {
      if (c.type === 'member-pending') h.decide(c.memberId, true);
    });
    const m = new MemberSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'pat' });
    members.push(m);
    const approved = new Promise<void>((resolve) => m.once('approved', resolve));
    await m.connect();
    await approved;
    expect(host.status().members[0]?.state).toBe('active');
  });

  it('reconnects after a dropped socket and keeps its identity and place', async () => {
    const rv = await startRendezvous();
    try {
      host = await createHost({ rendezvousUrl: rv.url, autoApprove: true, softEvictMs: 5000, hardEvictMs: 10_000 });
      const changes: string[] = [];
      host.on('change', (c) => changes.push(`${c.type}${'rejoined' in c && c.rejoined ? ':rejoined' : ''}`));
      const m = await joinSession({ code: host.code, rendezvousUrl: rv.url, name: 'rio', heartbeatMs: 100, reconnectDelayMs: 50 });
      members.push(m);
      const firstPeer = m.peer as number;
      const rejoined = new Promise<{ rejoin: boolean; peer: number }>((resolve) => m.once('joined', resolve));
      const dropped = new Promise<string>((resolve) => m.once('disconnected', resolve));
      expect(rv.core.dropPeer(host.nameplate, firstPeer)).toBe(true);
      await dropped;
      const info = await rejoined;
      expect(info.rejoin).toBe(true);
      expect(info.peer).not.toBe(firstPeer);
      expect(changes).toEqual(['member-joined', 'member-joined:rejoined']);
      const status = host.status();
      expect(status.members).toHaveLength(1);
      expect(status.members[0]).toMatchObject({ memberId: m.memberId, state: 'active', peer: info.peer });
    } finally {
      for (const mm of members.splice(0)) await mm.stop('test over');
      await host?.close();
      host = undefined;
      await rv.close();
    }
  });

  it('stops a member with SESSION_ENDED when the host ends the session', async () => {
    // A standalone rendezvous, so that it stays up and tells the member the host left.
    const rv = await startRendezvous();
    try {
      host = await createHost({ rendezvousUrl: rv.url, autoApprove: true });
      const m = await joinSession({ code: host.code, rendezvousUrl: rv.url, name: 'eve', reconnectDelayMs: 50 });
      members.push(m);
      const fatal = new Promise<string>((resolve) => m.once('fatal', (err) => resolve(err.code)));
      await host.close();
      host = undefined;
      expect(await fatal).toBe('SESSION_ENDED');
    } finally {
      await rv.close();
    }
  });

  it('gives up reconnecting after the configured time when the session is unreachable', async () => {
    host = await createHost({ autoApprove: true });
    const m = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'gus', reconnectDelayMs: 50, reconnectForMs: 400 });
    members.push(m);
    const fatal = new Promise<string>((resolve) => m.once('fatal', (err) => resolve(err.code)));
    // The embedded rendezvous goes down with the host: nothing to reconnect to.
    await host.close();
    host = undefined;
    expect(['SESSION_ENDED', 'SESSION_UNREACHABLE']).toContain(await fatal);
  });

  it.each([
    ['a malformed key exchange message', [{ kind: 'pake', msg: '!!!' }]],
    ['a point that is not on the curve', [{ kind: 'pake', msg: Buffer.from([4, ...new Array<number>(64).fill(7)]).toString('base64') }]],
    ['a replayed key exchange message', [{ kind: 'pake', msg: 'BKVvqAfKqlOk0o27mFO5gVxhpBERim/lFqh5hDR1FHD5AQFTrDPQ1fIEf/2xo+Qsm05r5mJ2bh7rQRaYjt5fkSw=' }, { kind: 'pake', msg: 'BKVvqAfKqlOk0o27mFO5gVxhpBERim/lFqh5hDR1FHD5AQFTrDPQ1fIEf/2xo+Qsm05r5mJ2bh7rQRaYjt5fkSw=' }]],
    ['a confirmation before the exchange', [{ kind: 'confirm', confirm: Buffer.alloc(32).toString('base64') }]],
  ])('rejects a claimant that sends %s, and the session carries on', async (_what, bodies) => {
    host = await createHost({ autoApprove: true });
    const good = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'good' });
    members.push(good);
    const failed = new Promise<string>((resolve) => host?.once('pake-failed', (_peer, reason) => resolve(reason)));
    const raw = await RendezvousClient.connect(host.rendezvousUrl);
    const closed = new Promise<string>((resolve) => raw.once('close', resolve));
    await raw.claim(host.nameplate);
    for (const body of bodies) raw.send(0, body);
    expect(await failed).toMatch(/./);
    expect(await closed).toMatch(/wrong code|closed/);
    const later = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'later' });
    members.push(later);
    expect(host.status().members.map((m) => m.state)).toEqual(['active', 'active']);
  });

  it('lets a member find the embedded rendezvous from the LAN beacon', async () => {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    host = await createHost({ autoApprove: true, lanBeacon: { port, targets: ['127.0.0.1'], intervalMs: 50 } });
    const urls = await findOnLan(host.nameplate, { port, timeoutMs: 3000 });
    expect(urls).toContain(host.rendezvousUrl);
    members.push(await joinSession({ code: host.code, rendezvousUrl: urls[0] as string, name: 'lan' }));
    expect(host.status().members[0]?.state).toBe('active');
  });

  it('tells a member that was silent but connected that it was evicted, and it rejoins', async () => {
    host = await createHost({ autoApprove: true, softEvictMs: 150, hardEvictMs: 400 });
    const changes: string[] = [];
    host.on('change', (c) => changes.push(`${c.type}${'reason' in c ? `:${c.reason}` : ''}${'rejoined' in c && c.rejoined ? ':rejoined' : ''}`));
    // Heartbeats far apart: the link stays up while the host hears nothing.
    const m = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'sly', heartbeatMs: 60_000, reconnectDelayMs: 50 });
    members.push(m);
    const warned = new Promise<string>((resolve) => m.once('warning', (err) => resolve(err.code)));
    const rejoined = new Promise<boolean>((resolve) => m.on('joined', (j) => j.rejoin && resolve(true)));
    expect(await warned).toBe('SESSION_EVICTED');
    expect(await rejoined).toBe(true);
    expect(changes.slice(0, 4)).toEqual(['member-joined', 'member-left:soft-evicted', 'member-left:hard-evicted', 'member-joined:rejoined']);
  });
});
