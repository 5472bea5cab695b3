// One IcePeer in its own process (so a test can put it in a network namespace), driven by JSON
// lines: stdin takes {"signal": IceSignal} (from the other side) and {"send": text}; stdout gives
// {"event":"signal","signal"}, {"event":"open","route"}, {"event":"data","text","route"} and
// {"event":"settled","route"} (once ICE nominated its pair) and {"event":"closed","reason"}.
// `route` is the link's selected candidate pair at that moment.
//   node --import tsx ice-peer-proc.ts initiator|responder [BIND_ADDRESS]
import { createInterface } from 'node:readline';
import { IcePeer, type IceLink, type IceSignal } from '../transport/ice-link.js';

const [role, bindAddress] = process.argv.slice(2) as ['initiator' | 'responder', string | undefined];
if (role !== 'initiator' && role !== 'responder') throw new Error('usage: ice-peer-proc.ts initiator|responder [BIND_ADDRESS]');
const out = (e: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify(e)}\n`);
const peer = new IcePeer({
  role,
  sendSignal: (signal) => out({ event: 'signal', signal }),
  maxMessageBytes: 1 << 20,
  timeoutMs: 15_000,
  ...(bindAddress !== undefined ? { bindAddress } : {}),
});
let link: IceLink | undefined;
createInterface({ input: process.stdin }).on('line', (line) => {
  const msg = JSON.parse(line) as { signal?: IceSignal; send?: string };
  if (msg.signal !== undefined) peer.signal(msg.signal);
  if (msg.send !== undefined) link?.send(new TextEncoder().encode(msg.send));
});
process.stdin.on('end', () => process.exit(0));
peer.link.then((l) => {
  link = l;
  l.onData((bytes) => out({ event: 'data', text: new TextDecoder().decode(bytes), route: l.route() }));
  l.onClose((info) => out({ event: 'closed', reason: info.reason }));
  out({ event: 'open', route: l.route() });
  void l.settledRoute().then((route) => out({ event: 'settled', route }));
}, (err: unknown) => {
  out({ event: 'closed', reason: (err as Error).message });
});
