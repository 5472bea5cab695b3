// How a member's NAT maps UDP (RFC 5780 section 4.3, the part one server address can test): two
// Binding requests from one socket, to the rendezvous's STUN port and to the other port it names
// in OTHER-ADDRESS. The same public address and port both times: endpoint-independent mapping
// (a "cone" NAT or none; hole punching works, planner class 'permissive'). Different: the mapping
// depends on the destination (a symmetric NAT; punching fails against another such NAT,
// 'restrictive'). Filtering is not tested here: ICE outcomes show it.
import { createSocket } from 'node:dgram';
import { stunBindingWithOther } from './stun-client.js';
import type { MappedAddress } from './stun-message.js';

export interface NatMapping {
  mapping: 'endpoint-independent' | 'address-dependent' | 'unknown';
  /** The planner's class (planner/fleet.ts NatClass); undefined when unknown. */
  natClass: 'permissive' | 'restrictive' | undefined;
  /** The public address and port the rendezvous saw. */
  mapped: MappedAddress;
}

export async function probeNatMapping(server: { host: string; port: number }, opts: { timeoutMs?: number } = {}): Promise<NatMapping> {
  const socket = createSocket(server.host.includes(':') ? 'udp6' : 'udp4');
  await new Promise<void>((resolve) => socket.bind(0, () => resolve()));
  try {
    const timing = { timeoutMs: opts.timeoutMs ?? 300, retries: 2 };
    const first = await stunBindingWithOther(server, { socket, ...timing });
    if (first.other === undefined) return { mapping: 'unknown', natClass: undefined, mapped: first.mapped };
    const second = await stunBindingWithOther({ host: server.host, port: first.other.port }, { socket, ...timing });
    const same = second.mapped.address === first.mapped.address && second.mapped.port === first.mapped.port;
    return same
      ? { mapping: 'endpoint-independent', natClass: 'permissive', mapped: first.mapped }
      : { mapping: 'address-dependent', natClass: 'restrictive', mapped: first.mapped };
  } finally {
    socket.close();
  }
}
