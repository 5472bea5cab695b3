// bench/links.ts across emulated home routers (network namespaces, electron/engine/test-support/
// netns-nat.ts): RTT and throughput of a direct UDP (ICE) link punched through two NATs (a
// full-cone and a port-restricted one) against the same two members relayed by the rendezvous,
// and of a member behind a NAT to a public machine over ICE, over TCP (a WebSocket it dials) and
// relayed. Each end is its own process (bench/links-peer.ts); the kernel forwards and NATs every
// packet, so this prices the real paths (on one machine: no wire latency, no bandwidth limit).
// Needs root, iproute2 and nftables. Run: npx tsx bench/links-nat.ts
// Prints a table and writes bench/results/links-nat.json. KIWI_BENCH_QUICK=1 runs fewer iterations.
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { startLabRendezvous } from '../electron/engine/test-support/nat-pairs.js';
import { requireNft } from '../electron/engine/test-support/netns-faults.js';
import { createNatLab } from '../electron/engine/test-support/netns-nat.js';
import { canUseNetns, netnsWhyNot } from '../electron/engine/test-support/netns-star.js';
import { ProcessSet, tsEntry, waitEvent } from '../electron/engine/test-support/processes.js';
import { linkTable, QUICK, type LinkRow } from './links-measure.js';

if (!canUseNetns()) {
  console.error(`bench/links-nat needs network namespaces: ${netnsWhyNot()}`);
  process.exit(2);
}
requireNft();
const procs = new ProcessSet();
const lab = createNatLab([{ kind: 'full-cone', members: ['cone'] }, { kind: 'port-restricted', members: ['home'] }]);
process.once('exit', () => lab.tearDown());
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
const secret = randomBytes(32).toString('hex');
const peer = (ns: string, ...args: string[]) => procs.spawn('ip', ['netns', 'exec', ns, process.execPath, ...tsEntry('bench/links-peer.ts'), ...args]);

const LABEL: Record<string, string> = { udp: 'direct-udp (ICE)', tcp: 'direct (TCP)', relay: 'relayed' };
const rows: Array<LinkRow & { between: string }> = [];
try {
  const { url } = await startLabRendezvous(lab, procs);
  const runs = [
    { between: 'two NATs', echoNs: lab.members.cone!.ns, listen: '0.0.0.0', paths: 'udp,relay' },
    { between: 'NAT to public', echoNs: lab.pub, listen: lab.pubAddrs[0], paths: 'udp,tcp,relay' },
  ];
  for (const r of runs) {
    const echo = peer(r.echoNs, 'echo', url, r.listen, secret);
    const nameplate = (await waitEvent(echo, (e) => e.event === 'nameplate', 'the echoing end')).nameplate as number;
    const measuring = peer(lab.members.home!.ns, 'measure', url, String(nameplate), secret, r.paths);
    const code = await measuring.exited;
    if (code !== 0) throw new Error(`the measuring end exited with ${String(code)}: ${measuring.stderr.join('\n')}`);
    for (const e of measuring.events.filter((x) => x.event === 'row')) {
      rows.push({ between: r.between, path: `${LABEL[e.path as string] ?? String(e.path)}, ${r.between}`, encrypted: e.encrypted as boolean, size: e.size as string, bytes: e.bytes as number, rtt_ms: e.rtt_ms as number, throughput_mb_s: e.throughput_mb_s as number });
    }
    echo.child.kill('SIGKILL');
  }
  console.log(linkTable(rows));
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'links-nat.json'), `${JSON.stringify({ bench: 'links-nat', quick: QUICK, node: process.version, cpus: cpus().length, loadavg: loadavg(), measured_at: new Date().toISOString(), rows }, null, 2)}\n`);
} finally {
  procs.dispose();
  lab.tearDown();
}
process.exit(0);
