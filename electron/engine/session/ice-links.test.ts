// Ring links over ICE (WebRTC data channels) in a live session on loopback: the offer, answer and
// candidates travel through the host's encrypted control channels, links come up as direct UDP,
// and each falls back in order (ICE, then WebSocket, then the relay) where the one before fails;
// members report their measured NAT mapping in their capabilities.
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { HOST_PEER } from '../rendezvous/protocol.js';
import { startRendezvous, type Rendezvous } from '../rendezvous/server.js';
import type { IceSignal } from '../transport/ice-link.js';
import { createHost, type HostSession } from './host.js';
import { LinkManager, type RingLinkStatus } from './link-manager.js';
import { joinSession, type MemberSession } from './member.js';
import { RendezvousClient } from './rendezvous-client.js';
import { waitFor } from '../test-support/wait-for.js';

describe('ICE ring links in a session (loopback)', () => {
  let host: HostSession | undefined;
  const members: MemberSession[] = [];
  afterEach(async () => {
    for (const m of members.splice(0)) await m.stop('test over');
    await host?.close();
    host = undefined;
  });

  const measured = (h: HostSession, n: number) => () => {
    const s = h.status();
    return s.links.length === n && s.links.every((l) => l.state === 'up' && l.rttMs !== undefined && l.transport !== undefined) ? s : undefined;
  };

  it('forms every ring link as direct UDP, signaled through the host, and carries data encrypted', async () => {
    host = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
    for (const name of ['ada', 'bob']) members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name, listenHost: '127.0.0.1', heartbeatMs: 200 }));
    const status = await waitFor(measured(host, 3), 'three measured ring links', 30_000);
    expect(status.links.map((l) => [l.kind, l.transport])).toEqual([['direct', 'udp'], ['direct', 'udp'], ['direct', 'udp']]);
    expect(status.links.every((l) => (l.throughputMBps ?? 0) > 0)).toBe(true);
    const [ada, bob] = members as [MemberSession, MemberSession];
    // The member-to-member link: both ends signaled only through the host.
    const link = ada.ringLink(bob.peer as number);
    const incoming = bob.ringLink(ada.peer as number);
    expect(link?.kind).toBe('direct-udp');
    expect(link?.encrypted).toBe(true);
    // Each member measured its NAT mapping against the rendezvous's STUN ports (none here: endpoint-independent).
    const h = host;
    const caps = await waitFor(() => {
      const ms = h.status().members;
      return ms.every((m) => m.capabilities?.nat !== undefined) ? ms.map((m) => [m.capabilities?.nat, m.capabilities?.nat_mapping]) : undefined;
    }, 'NAT classes in the capabilities', 30_000);
    expect(caps).toEqual([['permissive', 'endpoint-independent'], ['permissive', 'endpoint-independent']]);
    expect(ada.natMapping).toBe('endpoint-independent');
    const payload = randomBytes(3 * 1024 * 1024);
    const got = new Promise<Uint8Array>((resolve) => incoming?.onMessage(resolve));
    link?.send(payload);
    expect(Buffer.from(await got).equals(payload)).toBe(true);
  });

  it('falls back to WebSocket links to and from a member with ICE off (its neighbours are refused at once)', async () => {
    host = await createHost({ autoApprove: true, listenHost: '127.0.0.1' });
    members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada', listenHost: '127.0.0.1', heartbeatMs: 200 }));
    members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'bob', listenHost: '127.0.0.1', heartbeatMs: 200, ice: false }));
    const status = await waitFor(measured(host, 3), 'three measured ring links', 30_000);
    const bob = (members[1] as MemberSession).peer as number;
    for (const l of status.links) expect([l.a, l.b, l.transport]).toEqual([l.a, l.b, [l.a, l.b].includes(bob) ? 'tcp' : 'udp']);
  });
});

/**
 * Two LinkManagers over a real rendezvous whose ICE signals cross through `relay` (the host's role
 * in a session): here it loses every candidate, as a network that filters UDP would, so ICE cannot
 * connect and the link must fall back.
 */
describe('ring link fallback when ICE cannot connect', () => {
  let rv: Rendezvous | undefined;
  const clients: RendezvousClient[] = [];
  const managers: LinkManager[] = [];
  afterEach(async () => {
    for (const m of managers.splice(0)) await m.close();
    for (const c of clients.splice(0)) c.close();
    await rv?.close();
  });

  async function pair(responderListens: boolean): Promise<{ a: LinkManager; b: LinkManager; signals: IceSignal[]; bPeer: number }> {
    rv = await startRendezvous({ host: '127.0.0.1', port: 0 });
    const hostClient = await RendezvousClient.connect(rv.url);
    clients.push(hostClient);
    const { nameplate } = await hostClient.open();
    const joined = new Promise<number>((resolve) => hostClient.once('peer-joined', (p) => resolve(p)));
    const memberClient = await RendezvousClient.connect(rv.url);
    clients.push(memberClient);
    const admitted = new Promise<void>((resolve) => memberClient.once('admitted', () => resolve()));
    const { peer } = await memberClient.claim(nameplate);
    await joined;
    hostClient.admit(peer);
    await admitted;
    const signals: IceSignal[] = [];
    let a: LinkManager | undefined;
    let b: LinkManager | undefined;
    const ice = { iceServers: [], timeoutMs: 1500 };
    const relay = (to: () => LinkManager | undefined, from: number) => (_peer: number, linkId: Uint8Array, s: IceSignal): void => {
      signals.push(s);
      if (s.kind !== 'candidate') setImmediate(() => to()?.signal(from, linkId, s));
    };
    a = new LinkManager({ rendezvous: hostClient, listenHost: '127.0.0.1', nameplate, selfPeer: HOST_PEER, ice, sendSignal: relay(() => b, HOST_PEER) });
    b = new LinkManager({ rendezvous: memberClient, listenHost: responderListens ? '127.0.0.1' : undefined, nameplate, selfPeer: peer, ice, sendSignal: relay(() => a, peer) });
    managers.push(a, b);
    await a.start();
    const addresses = await b.start();
    const linkId = randomBytes(16);
    const secret = randomBytes(32);
    b.assign({ peer: HOST_PEER, linkId, secret, role: 'responder', addresses: [] });
    a.assign({ peer, linkId, secret, role: 'initiator', addresses });
    return { a, b, signals, bPeer: peer };
  }

  const upAndMeasured = (m: LinkManager, peer: number) => (): RingLinkStatus | undefined =>
    m.statuses().find((s) => s.peer === peer && s.state === 'up' && s.rttMs !== undefined);

  it('falls back to the WebSocket direct link', async () => {
    const { a, b, signals, bPeer } = await pair(true);
    const s = await waitFor(upAndMeasured(a, bPeer), 'the link up', 30_000);
    expect(signals.some((x) => x.kind === 'offer')).toBe(true);
    expect(signals.some((x) => x.kind === 'answer')).toBe(true);
    expect(s).toMatchObject({ kind: 'direct', transport: 'tcp' });
    expect((await waitFor(upAndMeasured(b, HOST_PEER), 'the far end up', 30_000)).transport).toBe('tcp');
  });

  it('falls back to the relay when the responder has no direct listener either', async () => {
    const { a, signals, bPeer } = await pair(false);
    const s = await waitFor(upAndMeasured(a, bPeer), 'the link up', 30_000);
    expect(signals.some((x) => x.kind === 'answer')).toBe(true);
    expect(s).toMatchObject({ kind: 'relayed', transport: 'relay' });
  });
});
