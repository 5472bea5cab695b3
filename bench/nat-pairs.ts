// The NAT pair table (issue 19's closing note, like Kafila's Table III): emulated home routers in
// network namespaces (electron/engine/test-support/netns-nat.ts: full-cone, address-restricted,
// port-restricted and symmetric NATs, one member each, two members behind one NAT on one LAN, and
// the "hairpin" row: two members behind one hairpinning full-cone NAT on separate LANs, so only
// the router's public address joins them), a real session per ordered pair of kinds, and for each what the member-to-member link became (direct
// UDP, direct TCP, relayed), the time it took, and whether the planner's per-pair prediction
// (planner/nat-reach.ts) matched: from measured mappings alone, with each NAT's filtering known,
// and Kafila's kind-level expectation. Needs root, iproute2 and nftables.
// Run: npx tsx bench/nat-pairs.ts (as root). Prints the table and writes bench/results/nat-pairs.json.
// KIWI_BENCH_PARALLEL=N runs N pairs at once (default 4).
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { HAIRPIN_PAIRS, labPairs, PAIR_LAB, pairTable, pooled, probeMembers, runPair, startLabRendezvous } from '../electron/engine/test-support/nat-pairs.js';
import { requireNft } from '../electron/engine/test-support/netns-faults.js';
import { createNatLab } from '../electron/engine/test-support/netns-nat.js';
import { canUseNetns, netnsWhyNot } from '../electron/engine/test-support/netns-star.js';
import { ProcessSet } from '../electron/engine/test-support/processes.js';

if (!canUseNetns()) {
  console.error(`bench/nat-pairs needs network namespaces: ${netnsWhyNot()}`);
  process.exit(2);
}
requireNft();
const parallel = Number(process.env.KIWI_BENCH_PARALLEL ?? '4');
const procs = new ProcessSet();
const lab = createNatLab(PAIR_LAB);
process.once('exit', () => lab.tearDown());
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
try {
  const rv = await startLabRendezvous(lab, procs);
  const nats = await probeMembers(lab, rv.port);
  // The hairpin row; its control (a router that does not hairpin) is the netns test's.
  const pairs = [...labPairs(), HAIRPIN_PAIRS[0] as readonly [string, string]];
  const rows = await pooled(pairs, parallel, async ([a, b]) => runPair(lab, procs, rv.url, nats, lab.members[a]!, lab.members[b]!));
  console.log(pairTable(rows));
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(
    join(out, 'nat-pairs.json'),
    `${JSON.stringify({ bench: 'nat-pairs', node: process.version, cpus: cpus().length, loadavg: loadavg(), parallel, measured_at: new Date().toISOString(), members: nats, rows }, null, 2)}\n`,
  );
} finally {
  procs.dispose();
  lab.tearDown();
}
process.exit(0);
