// A member's NAT class in words, as `kiwi status` and the ring view show it:
// "NAT: endpoint-independent mapping, filtering unknown · port mapped (UPnP)".
import type { MemberNatClassWire } from './control-api.js';

const PORT_MAPPING_TEXT: Record<NonNullable<MemberNatClassWire['port_mapping']>, string> = { upnp: 'UPnP', 'nat-pmp': 'NAT-PMP' };

/** The class without the "NAT: " prefix; "not measured" when the member reported none. */
export function natClassText(n: MemberNatClassWire | null | undefined): string {
  if (n === null || n === undefined) return 'not measured';
  const mapping = n.mapping === null ? 'mapping unknown' : `${n.mapping} mapping`;
  const filtering = n.filtering === null ? 'filtering unknown' : `${n.filtering} filtering`;
  const port = n.port_mapping === null ? 'port not mapped' : `port mapped (${PORT_MAPPING_TEXT[n.port_mapping]})`;
  return `${n.none === true ? 'none (the rendezvous saw its own address), ' : ''}${mapping}, ${filtering} · ${port}`;
}
