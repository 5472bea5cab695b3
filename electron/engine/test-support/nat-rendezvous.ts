// Run inside the public namespace of netns-nat.ts: a rendezvous on every address whose STUN
// service names the lab's two public addresses as each other's OTHER-ADDRESS (RFC 5780).
//   npx tsx nat-rendezvous.ts ADDR1 ADDR2     prints {"event":"listening","port":P}
import { startRendezvous } from '../rendezvous/server.js';

const [a, b] = process.argv.slice(2) as [string, string];
const rv = await startRendezvous({ host: '0.0.0.0', port: 0, stunAddressPair: [a, b] });
if (rv.stunPort === undefined) throw new Error('the rendezvous has no STUN service');
process.stdout.write(`${JSON.stringify({ event: 'listening', port: rv.port })}\n`);
