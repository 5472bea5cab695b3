// One participant of the relay-isolation test, run as its own process (inside a network namespace
// when the test can create them). Prints JSON lines on stdout.
//   rendezvous <listenHost> <port> <relayDumpFile>   relayed payloads appended to the file, hex per line
//   host <rendezvousUrl> <listenHost>
//   member <code> <rendezvousUrl> <listenHost> <name> <secretText> [advertise]
// A member sends `${secretText} from ${name}` over each ring link to another member (not the host)
// and prints every message it receives on such a link.
import { appendFileSync } from 'node:fs';
import { startRendezvous } from '../rendezvous/server.js';
import { createHost } from '../session/host.js';
import { MemberSession } from '../session/member.js';

const print = (value: unknown): void => void process.stdout.write(`${JSON.stringify(value)}\n`);
const [mode, ...args] = process.argv.slice(2);

if (mode === 'rendezvous') {
  const [host, port, dump] = args as [string, string, string];
  const rv = await startRendezvous({ host, port: Number(port), onRelay: (from, to, payload) => appendFileSync(dump, `${from} ${to} ${Buffer.from(payload).toString('hex')}\n`) });
  print({ event: 'listening', url: rv.url });
} else if (mode === 'host') {
  const [url, listenHost] = args as [string, string];
  const host = await createHost({ rendezvousUrl: url, autoApprove: true, ...(listenHost !== 'none' ? { listenHost } : {}) });
  print({ event: 'session', code: host.code });
  host.on('link', (l) => print({ event: 'link', a: l.a, b: l.b, state: l.state, kind: l.kind ?? null }));
} else if (mode === 'member') {
  const [code, url, listenHost, name, secret, advertise] = args as [string, string, string, string, string, string | undefined];
  const member = new MemberSession({
    code, rendezvousUrl: url, name, listenHost, heartbeatMs: 500,
    // An address nobody listens on: the direct attempt must fail and fall back to the relay (no
    // UDP path either, which on loopback would always connect).
    ...(advertise !== undefined ? { advertise: [advertise], ice: false as const } : {}),
  });
  member.on('link', (s) => {
    print({ event: 'link', peer: s.peer, state: s.state, kind: s.kind ?? null, error: s.error ?? null });
    const link = member.ringLink(s.peer);
    if (s.state !== 'up' || s.peer === 0 || link === undefined || s.rttMs !== undefined) return;
    link.onMessage((bytes) => print({ event: 'message', from: s.peer, text: Buffer.from(bytes).toString('utf8') }));
    link.send(Buffer.from(`${secret} from ${name}`));
  });
  await member.connect();
  print({ event: 'joined', peer: member.peer });
} else {
  throw new Error(`unknown mode ${mode}`);
}
