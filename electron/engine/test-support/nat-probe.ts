// Run inside a member's namespace (netns-nat.ts): how its NAT maps UDP, two ways, as one JSON line.
//   npx tsx nat-probe.ts HOST PORT
// `rfc5780`: RFC 5780 section 4.3's full mapping test against the rendezvous's two public
// addresses (its STUN service names the second one, with its other port, as OTHER-ADDRESS):
// binding I to A1:P1, II to A2:P1, III to A2:P2, all from one socket. II = I: endpoint-independent;
// III = II: address-dependent; else address-and-port-dependent.
// `member`: what a member measures for its capabilities (rendezvous/stun-nat.ts: two ports, one address).
import { createSocket } from 'node:dgram';
import { stunBindingWithOther } from '../rendezvous/stun-client.js';
import { probeNatMapping } from '../rendezvous/stun-nat.js';

const [host, portText] = process.argv.slice(2) as [string, string];
const port = Number(portText);
const same = (a: { address: string; port: number }, b: { address: string; port: number }): boolean => a.address === b.address && a.port === b.port;
const socket = createSocket('udp4');
await new Promise<void>((resolve) => socket.bind(0, () => resolve()));
const timing = { socket, timeoutMs: 300, retries: 3 };
const one = await stunBindingWithOther({ host, port }, timing);
if (one.other === undefined || one.other.address === host) throw new Error(`the STUN service at ${host}:${port} names no second address`);
const two = await stunBindingWithOther({ host: one.other.address, port }, timing);
const three = await stunBindingWithOther({ host: one.other.address, port: one.other.port }, timing);
socket.close();
const rfc5780 = same(one.mapped, two.mapped) ? 'endpoint-independent' : same(two.mapped, three.mapped) ? 'address-dependent' : 'address-and-port-dependent';
const member = await probeNatMapping({ host, port });
process.stdout.write(`${JSON.stringify({ rfc5780, mapped: [one.mapped, two.mapped, three.mapped], member })}\n`);
