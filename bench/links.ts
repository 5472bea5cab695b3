// Round-trip time and throughput of Kiwi's links on loopback: a raw WebSocket (baseline), a direct
// link (WebSocket over TCP), a direct UDP link (ICE: a WebRTC data channel) and a link relayed by the rendezvous, each with and without encryption (secure-link), for
// 8 KiB and 1 MiB messages. RTT: median of echo round trips. Throughput: one-way burst, then an ack.
// Run: npx tsx bench/links.ts (the same links across emulated home NATs: bench/links-nat.ts)
// Prints a table and writes bench/results/links.json. KIWI_BENCH_QUICK=1 runs fewer iterations.
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RelayChannel } from '../electron/engine/rendezvous/protocol.js';
import { startRendezvous } from '../electron/engine/rendezvous/server.js';
import { RendezvousClient } from '../electron/engine/session/rendezvous-client.js';
import { IcePeer } from '../electron/engine/transport/ice-link.js';
import type { Link } from '../electron/engine/transport/link.js';
import { openSecureLink } from '../electron/engine/transport/secure-link.js';
import { connectWs, dialDirect, listenDirect, startWsServer } from '../electron/engine/transport/ws.js';
import { linkTable, measure, QUICK, serveEcho, SIZES, type Endpoint, type LinkRow } from './links-measure.js';

interface Pair {
  a: Endpoint;
  b: Endpoint;
  close(): Promise<void>;
}

const MAX = 17 * 1024 * 1024;

async function rawWsPair(): Promise<Pair> {
  let serverSide: (e: Endpoint) => void = () => undefined;
  const accepted = new Promise<Endpoint>((r) => (serverSide = r));
  const srv = await startWsServer({
    host: '127.0.0.1', port: 0, maxPayloadBytes: MAX,
    onConnection: (conn) => serverSide({ send: (b) => conn.sendBinary(b), onMessage: (l) => conn.onBinary(l) }),
  });
  const conn = await connectWs(srv.url, { maxPayloadBytes: MAX });
  const b = await accepted;
  return { a: { send: (m) => conn.sendBinary(m), onMessage: (l) => conn.onBinary(l) }, b, close: async () => { conn.close(); await srv.close(); } };
}

async function directLinks(): Promise<{ a: Link; b: Link; close(): Promise<void> }> {
  let accept: (l: Link) => void = () => undefined;
  const incoming = new Promise<Link>((r) => (accept = r));
  const listener = await listenDirect({ host: '127.0.0.1', maxPayloadBytes: MAX, onLink: (l) => accept(l) });
  const a = await dialDirect(listener.url, { maxPayloadBytes: MAX });
  const b = await incoming;
  return { a, b, close: async () => { a.close(); b.close(); await listener.close(); } };
}

async function iceLinks(): Promise<{ a: Link; b: Link; close(): Promise<void> }> {
  let b: IcePeer | undefined;
  const a = new IcePeer({ role: 'initiator', maxMessageBytes: MAX, sendSignal: (s) => setImmediate(() => b?.signal(s)) });
  b = new IcePeer({ role: 'responder', maxMessageBytes: MAX, sendSignal: (s) => setImmediate(() => a.signal(s)) });
  const [la, lb] = await Promise.all([a.link, b.link]);
  return { a: la, b: lb, close: async () => { la.close(); lb.close(); } };
}

async function relayedLinks(): Promise<{ a: Link; b: Link; close(): Promise<void> }> {
  const rv = await startRendezvous();
  const host = await RendezvousClient.connect(rv.url);
  const { nameplate } = await host.open();
  const member = await RendezvousClient.connect(rv.url);
  const admitted = new Promise<void>((r) => member.once('admitted', r));
  const { peer } = await member.claim(nameplate);
  host.admit(peer);
  await admitted;
  return {
    a: member.relayLink(0, RelayChannel.DATA),
    b: host.relayLink(peer, RelayChannel.DATA),
    close: async () => { member.close(); host.close(); await rv.close(); },
  };
}

async function securePair(links: { a: Link; b: Link; close(): Promise<void> }, encrypt: boolean): Promise<Pair> {
  const secret = { secret: randomBytes(32), context: 'bench' };
  const [a, b] = await Promise.all([
    openSecureLink(links.a, { role: 'initiator', secret, encrypt, maxPayloadBytes: MAX - 64 }),
    openSecureLink(links.b, { role: 'responder', secret, encrypt, maxPayloadBytes: MAX - 64 }),
  ]);
  return { a: { send: (m) => a.send(m), onMessage: (l) => a.onMessage(l) }, b: { send: (m) => b.send(m), onMessage: (l) => b.onMessage(l) }, close: links.close };
}

const variants: Array<{ path: string; encrypted: boolean | null; make: () => Promise<Pair> }> = [
  { path: 'raw ws (baseline)', encrypted: null, make: rawWsPair },
  { path: 'direct', encrypted: false, make: async () => securePair(await directLinks(), false) },
  { path: 'direct', encrypted: true, make: async () => securePair(await directLinks(), true) },
  { path: 'direct-udp (ICE)', encrypted: false, make: async () => securePair(await iceLinks(), false) },
  { path: 'direct-udp (ICE)', encrypted: true, make: async () => securePair(await iceLinks(), true) },
  { path: 'relayed', encrypted: false, make: async () => securePair(await relayedLinks(), false) },
  { path: 'relayed', encrypted: true, make: async () => securePair(await relayedLinks(), true) },
];

const rows: LinkRow[] = [];
for (const size of SIZES) {
  for (const v of variants) {
    const pair = await v.make();
    try {
      serveEcho(pair.b);
      const r = await measure(pair.a, size.bytes, size.rttRounds, size.burst);
      rows.push({ path: v.path, encrypted: v.encrypted, size: size.label, bytes: size.bytes, rtt_ms: r.rttMs, throughput_mb_s: r.mbps });
    } finally {
      await pair.close();
    }
  }
}

console.log(linkTable(rows));

const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(
  join(out, 'links.json'),
  `${JSON.stringify({ bench: 'links', quick: QUICK, node: process.version, cpus: (await import('node:os')).cpus().length, loadavg: (await import('node:os')).loadavg(), measured_at: new Date().toISOString(), rows }, null, 2)}\n`,
);
process.exit(0);
