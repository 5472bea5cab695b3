// One end of bench/links-nat.ts, run as its own process inside a namespace of the NAT lab. Both
// ends meet through the lab's rendezvous: the echoing end opens a nameplate, the measuring end
// claims it; ICE signals and the echoing end's direct URL travel as rendezvous messages. Prints
// JSON lines on stdout.
//   echo URL LISTEN_ADDR SECRET_HEX                    (direct links to ws://LISTEN_ADDR:port) prints {"event":"nameplate","nameplate":N}
//   measure URL NAMEPLATE SECRET_HEX PATHS             PATHS: comma-separated udp, tcp, relay;
//                                                      prints one {"event":"row",...} per measurement
import { RelayChannel } from '../electron/engine/rendezvous/protocol.js';
import { RendezvousClient } from '../electron/engine/session/rendezvous-client.js';
import { IcePeer, type IceSignal } from '../electron/engine/transport/ice-link.js';
import { rendezvousStun } from '../electron/engine/transport/ice-servers.js';
import type { Link } from '../electron/engine/transport/link.js';
import { openSecureLink } from '../electron/engine/transport/secure-link.js';
import { dialDirect, listenDirect } from '../electron/engine/transport/ws.js';
import { measure, serveEcho, SIZES, type Endpoint } from './links-measure.js';

const MAX = 17 * 1024 * 1024;
const print = (value: unknown): void => void process.stdout.write(`${JSON.stringify(value)}\n`);
const [mode, url, arg, secretHex, pathsText] = process.argv.slice(2) as [string, string, string, string, string | undefined];
const secret = { secret: Buffer.from(secretHex, 'hex'), context: 'bench' };
const iceServers = [rendezvousStun(url)].filter((s): s is string => s !== undefined);

async function secure(link: Link, role: 'initiator' | 'responder', encrypt: boolean): Promise<Endpoint> {
  const s = await openSecureLink(link, { role, secret, encrypt, maxPayloadBytes: MAX - 64 });
  return { send: (m) => s.send(m), onMessage: (l) => s.onMessage(l) };
}

const client = await RendezvousClient.connect(url);
if (mode === 'echo') {
  const { nameplate } = await client.open();
  // Which links to encrypt: the measuring end says so before each one (the same order as it opens them).
  const encryptNext: boolean[] = [];
  const listener = await listenDirect({ host: arg, maxPayloadBytes: MAX, onLink: (l) => void secure(l, 'responder', encryptNext.shift() ?? true).then(serveEcho).catch(() => undefined) });
  let ice: IcePeer | undefined;
  client.on('peer-joined', (peer: number) => client.admit(peer));
  client.on('incoming-link', (l: Link) => void secure(l, 'responder', encryptNext.shift() ?? true).then(serveEcho).catch(() => undefined));
  client.on('from', (peer: number, body: { t?: string; s?: IceSignal; encrypt?: boolean }) => {
    if (body.t === 'next') {
      encryptNext.push(body.encrypt === true);
      client.send(peer, { t: 'direct', url: listener.url });
    } else if (body.t === 'ice' && body.s !== undefined) {
      if (body.s.kind === 'offer') {
        ice = new IcePeer({ role: 'responder', iceServers, maxMessageBytes: MAX, timeoutMs: 15_000, sendSignal: (s) => client.send(peer, { t: 'ice', s }) });
        void ice.link.then((l) => secure(l, 'responder', encryptNext.shift() ?? true)).then(serveEcho).catch(() => undefined);
      }
      ice?.signal(body.s);
    }
  });
  print({ event: 'nameplate', nameplate });
} else if (mode === 'measure') {
  const admitted = new Promise<void>((resolve) => client.once('admitted', () => resolve()));
  await client.claim(Number(arg));
  await admitted;
  let onBody: (body: { t?: string; s?: IceSignal; url?: string }) => void = () => undefined;
  client.on('from', (_peer: number, body: { t?: string; s?: IceSignal; url?: string }) => onBody(body));
  const next = async (encrypt: boolean): Promise<string> => {
    const answered = new Promise<string>((resolve) => (onBody = (b) => b.t === 'direct' && resolve(b.url as string)));
    client.send(0, { t: 'next', encrypt });
    return answered;
  };
  for (const path of (pathsText ?? '').split(',')) {
    for (const encrypt of [false, true]) {
      const directUrl = await next(encrypt);
      let link: Link;
      if (path === 'udp') {
        const peer = new IcePeer({ role: 'initiator', iceServers, maxMessageBytes: MAX, timeoutMs: 15_000, sendSignal: (s) => client.send(0, { t: 'ice', s }) });
        onBody = (b) => b.t === 'ice' && b.s !== undefined && peer.signal(b.s);
        link = await peer.link;
      } else if (path === 'tcp') {
        link = await dialDirect(directUrl, { maxPayloadBytes: MAX });
      } else {
        link = client.relayLink(0, RelayChannel.DATA);
      }
      const e = await secure(link, 'initiator', encrypt);
      for (const size of SIZES) {
        const r = await measure(e, size.bytes, size.rttRounds, size.burst);
        print({ event: 'row', path, encrypted: encrypt, size: size.label, bytes: size.bytes, rtt_ms: r.rttMs, throughput_mb_s: r.mbps, kind: link.kind });
      }
      link.close();
    }
  }
  client.close();
  process.exit(0);
} else {
  throw new Error(`unknown mode ${mode}`);
}
