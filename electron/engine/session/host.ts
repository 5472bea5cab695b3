// The host's side of a session, composed: opens a nameplate on a rendezvous (its own embedded one
// unless given a URL), starts the host's ring links, creates the HostSession (host-session.ts) with
// the session's code, and announces an embedded rendezvous on the LAN. The session's parts: SPAKE2
// with each claimant (pake-gate.ts, with the host's own count of wrong codes, maxPakeFailures), the
// members' control connections (host-controls.ts), hellos that prove an identity key
// (host-hello.ts), the membership reducer (membership.ts) and the ring's links (ring-links.ts).
import { HOST_PEER } from '../rendezvous/protocol.js';
import { startRendezvous, type Rendezvous } from '../rendezvous/server.js';
import { wsUrls } from '../transport/addresses.js';
import { HostSession, type HostOptions } from './host-session.js';
import { ringIceOptions } from './ice-options.js';
import { startBeacon } from './lan-beacon.js';
import { LinkManager } from './link-manager.js';
import { RendezvousClient } from './rendezvous-client.js';
import { codePassword, formatSessionCode, generateSessionCode } from './session-code.js';

export { HostSession, type HostEvents, type HostOptions, type SessionStatus } from './host-session.js';
export type { MemberView } from './member-views.js';
export { controlContext, DEFAULT_MAX_PAKE_FAILURES, pakeAad, PAKE_ID_HOST, PAKE_ID_MEMBER, rejoinAad, rejoinScalar, REPLACED_REASON } from './session-params.js';

/** Whether the embedded rendezvous is announced on the LAN: asked for, or by default when it listens beyond loopback. */
export function lanBeaconWanted(bindHost: string, lanBeacon: HostOptions['lanBeacon']): boolean {
  const beyondLoopback = !bindHost.startsWith('127.') && bindHost !== '::1' && bindHost !== 'localhost';
  return lanBeacon !== false && (lanBeacon !== undefined || beyondLoopback);
}

export async function createHost(opts: HostOptions = {}): Promise<HostSession> {
  let embedded: Rendezvous | undefined;
  let url = opts.rendezvousUrl;
  const bindHost = opts.embeddedRendezvous?.host ?? '127.0.0.1';
  if (url === undefined) {
    embedded = await startRendezvous({ host: bindHost, port: opts.embeddedRendezvous?.port ?? 0 });
    // A wildcard bind is shown as this machine's first LAN address, which members can dial.
    url = wsUrls(bindHost, embedded.port)[0] ?? embedded.url;
  }
  let client: RendezvousClient | undefined;
  try {
    client = await RendezvousClient.connect(url);
    const { nameplate } = await client.open();
    const code = generateSessionCode(nameplate);
    let self: HostSession | undefined;
    // Relay-only (no listenHost) takes no direct links of any kind.
    const ice = ringIceOptions(url, opts.ice, opts.listenHost);
    const links = new LinkManager({
      rendezvous: client, listenHost: opts.listenHost, nameplate, selfPeer: HOST_PEER,
      ...(ice !== undefined ? { ice } : {}),
      sendSignal: (peer, linkId, signal) => self?.sendIceSignal(peer, linkId, signal),
    });
    const addresses = await links.start();
    const host = new HostSession(formatSessionCode(code), nameplate, url, client, links, addresses, embedded, opts, codePassword(code));
    self = host;
    if (embedded !== undefined && opts.lanBeacon !== false && lanBeaconWanted(bindHost, opts.lanBeacon)) {
      const b = opts.lanBeacon ?? {};
      const beacon = await startBeacon({
        beacon: { kiwi: 1, nameplate, rendezvous: wsUrls(bindHost, embedded.port).slice(0, 8) },
        ...(b.port !== undefined ? { port: b.port } : {}),
        ...(b.targets !== undefined ? { targets: b.targets } : {}),
        ...(b.intervalMs !== undefined ? { intervalMs: b.intervalMs } : {}),
      });
      host.stopBeacon = () => beacon.close();
    }
    return host;
  } catch (err) {
    client?.close();
    await embedded?.close();
    throw err;
  }
}
