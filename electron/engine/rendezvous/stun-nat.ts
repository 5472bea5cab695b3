// How a member's NAT maps UDP (RFC 5780 section 4.3, the part one server address can test): two
// Binding requests from one socket, to the rendezvous's STUN port and to the other port it names
// in OTHER-ADDRESS. The same public address and port both times: endpoint-independent mapping
// (a "cone" NAT or none; hole punching works, planner class 'permissive'). Different: the mapping
// depends on the destination (a symmetric NAT; punching fails against another such NAT,
// 'restrictive'). Filtering is not tested here: ICE outcomes show it.
import { createSocket } from 'node:dgram';
import { networkInterfaces } from 'node:os';
import { stunBindingWithOther } from './stun-client.js';
import type { MappedAddress } from './stun-message.js';

export interface NatMapping {
  mapping: 'endpoint-independent' | 'address-dependent' | 'unknown';
  /** The planner's class (planner/fleet.ts NatClass); undefined when unknown. */
  natClass: 'permissive' | 'restrictive' | undefined;
  /** The public address and port the rendezvous saw. */
  mapped: MappedAddress;
  /** The rendezvous saw one of this machine's own addresses: no NAT between them (others can dial it). */
  local: boolean;
  /** The quicker Binding round trip, ms: the member's distance to the rendezvous (the planner prices relays by it). */
  rttMs: number;
}

export async function probeNatMapping(server: { host: string; port: number }, opts: { timeoutMs?: number } = {}): Promise<NatMapping> {
  const socket = createSocket(server.host.includes(':') ? 'udp6' : 'udp4');
  await new Promise<void>((resolve) => socket.bind(0, () => resolve()));
  try {
    const timing = { timeoutMs: opts.timeoutMs ?? 300, retries: 2 };
    let started = performance.now();
    const first = await stunBindingWithOther(server, { socket, ...timing });
    let rttMs = performance.now() - started;
    const local = Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === first.mapped.address) === true);
    if (first.other === undefined) return { mapping: 'unknown', natClass: undefined, mapped: first.mapped, local, rttMs };
    started = performance.now();
    const second = await stunBindingWithOther({ host: server.host, port: first.other.port }, { socket, ...timing });
    rttMs = Math.min(rttMs, performance.now() - started);
    const same = second.mapped.address === first.mapped.address && second.mapped.port === first.mapped.port;
    return same
      ? { mapping: 'endpoint-independent', natClass: 'permissive', mapped: first.mapped, local, rttMs }
      : { mapping: 'address-dependent', natClass: 'restrictive', mapped: first.mapped, local, rttMs };
  } finally {
    socket.close();
  }
}
