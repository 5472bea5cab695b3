// Run inside a member namespace of netns-nat.ts (port-mapping.netns.process.test.ts): a TCP
// listener that greets every connection with "kiwi", its port mapped on the router by PortMapper.
//   npx tsx port-map-probe.ts PROTOCOLS LEASE_S    (PROTOCOLS: upnp,nat-pmp)
// prints {"event":"mapped",...} (or {"event":"unmapped"} without a gateway), {"event":"renewed"}
// after each lease renewal; "close" on stdin removes the mapping and prints {"event":"closed"}.
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { PortMapper, type PortMappingProtocol } from '../transport/port-mapping.js';

const [protocols, leaseS] = process.argv.slice(2) as [string, string];
const say = (event: string, rest: Record<string, unknown> = {}): void => void process.stdout.write(`${JSON.stringify({ event, ...rest })}\n`);
const server = createServer((s) => s.end('kiwi\n'));
await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
const port = (server.address() as { port: number }).port;
const mapper = new PortMapper({ protocols: protocols.split(',') as PortMappingProtocol[], leaseS: Number(leaseS), onRenewed: (m) => say('renewed', { renewals: m.renewals }) });
const m = await mapper.map(port);
say(m === undefined ? 'unmapped' : 'mapped', { port, ...(m !== undefined ? { mapping: m } : {}) });
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== 'close') continue;
  await mapper.close();
  say('closed');
  server.close();
  process.exit(0);
}
