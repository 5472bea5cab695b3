// Port mapping on an emulated home router (transport/port-mapping.ts): a port-restricted NAT of
// test-support/netns-nat.ts running miniupnpd (UPnP-IGD v2 and NAT-PMP, nftables backend). A
// member's TCP listener, mapped through each protocol, is reachable from the public side at the
// mapped address; a NAT-PMP lease is renewed before it ends; closing removes the router's rule.
// Without the router's help nothing from outside reaches the member. And a ring link that these
// NATs would otherwise relay (a member behind a symmetric NAT dialing one behind this
// port-restricted one: no hole punch works, nat-pairs.ts) forms as a direct TCP link to the
// mapped address. Needs root, nftables and miniupnpd; skipped, saying why, without them.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNft } from '../test-support/netns-faults.js';
import { probeMembers, runPair, startLabRendezvous } from '../test-support/nat-pairs.js';
import { createNatLab, type NatLab, type NatMember } from '../test-support/netns-nat.js';
import { canUseNetns, netnsWhyNot } from '../test-support/netns-star.js';
import { MINIUPNPD, startMiniupnpd, type Miniupnpd } from '../test-support/netns-upnp.js';
import { isolatedCacheDir, ProcessSet, repoRoot, tsEntry, type Proc, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const why = !canUseNetns() ? netnsWhyNot() : !existsSync(MINIUPNPD) ? `${MINIUPNPD} is missing (apt-get install miniupnpd-nftables)` : '';
if (why === '') requireNft();
const TAG = `pm${process.pid % 10000}`;
const procs = new ProcessSet();
isolatedCacheDir('kiwi-port-mapping-');
let lab: NatLab | undefined;
let upnpd: Miniupnpd | undefined;
// Removed also when the run dies before afterAll.
process.once('exit', () => {
  upnpd?.stop();
  lab?.tearDown();
});

beforeAll(async () => {
  if (why !== '') return;
  lab = createNatLab([{ kind: 'port-restricted', members: ['m'], portMapping: true }, { kind: 'symmetric', members: ['s'] }], TAG);
  upnpd = await startMiniupnpd(lab, 1, TAG);
}, 30_000);

afterAll(() => {
  procs.dispose();
  upnpd?.stop();
  lab?.tearDown();
});

/** What a TCP connection from the public namespace to host:port reads ('' when refused or unanswered within 3 s). */
async function readFromPublic(host: string, port: number): Promise<string> {
  const script = `const s = require('net').connect(${port}, ${JSON.stringify(host)}); let got = ''; s.setTimeout(3000, () => s.destroy());` +
    's.on("data", (d) => { got += d; }); s.on("error", () => undefined); s.on("close", () => console.log(JSON.stringify(got)));';
  const { stdout } = await run('ip', ['netns', 'exec', (lab as NatLab).pub, process.execPath, '-e', script], { cwd: repoRoot });
  return JSON.parse(stdout.trim()) as string;
}

const probe = (protocols: string, leaseS: number): Proc =>
  procs.spawn('ip', ['netns', 'exec', (lab as NatLab).members.m?.ns as string, process.execPath, ...tsEntry('electron/engine/test-support/port-map-probe.ts'), protocols, String(leaseS)]);

async function close(p: Proc): Promise<void> {
  p.child.stdin?.write('close\n');
  await waitEvent(p, (e) => e.event === 'closed', 'the mapping closed');
}

describe(`port mapping through the router (UPnP-IGD, NAT-PMP; network namespaces)${why === '' ? '' : ` (skipped: ${why})`}`, () => {
  it.skipIf(why !== '')('maps the listener\'s port over UPnP-IGD: reachable from the public side at the mapped address; closing removes the rule', async () => {
    const p = probe('upnp', 3600);
    const mapped = await waitEvent(p, (e) => e.event === 'mapped' || e.event === 'unmapped', 'the mapping', 20_000);
    expect(mapped.event).toBe('mapped');
    const m = mapped.mapping as { protocol: string; external: { host: string; port: number }; internal: { host: string; port: number } };
    expect(m.protocol).toBe('upnp');
    expect(m.internal).toEqual({ host: '192.168.1.10', port: mapped.port });
    expect(m.external.host).toBe(upnpd?.external);
    expect(upnpd?.natRules()).toContain(`dport ${m.external.port}`);
    expect(await readFromPublic(m.external.host, m.external.port)).toBe('kiwi\n');
    await close(p);
    expect(upnpd?.natRules()).not.toContain(`dport ${m.external.port}`);
    expect(await readFromPublic(m.external.host, m.external.port)).toBe('');
  }, 40_000);

  it.skipIf(why !== '')('maps over NAT-PMP, renews the lease before it ends, and unmaps on close', async () => {
    const p = probe('nat-pmp', 4);
    const mapped = await waitEvent(p, (e) => e.event === 'mapped' || e.event === 'unmapped', 'the mapping', 20_000);
    expect(mapped.event).toBe('mapped');
    const m = mapped.mapping as { protocol: string; external: { host: string; port: number } };
    expect(m.protocol).toBe('nat-pmp');
    expect(m.external.host).toBe(upnpd?.external);
    await waitEvent(p, (e) => e.event === 'renewed', 'a lease renewal', 20_000);
    // Still mapped after the renewal.
    expect(await readFromPublic(m.external.host, m.external.port)).toBe('kiwi\n');
    await close(p);
    expect(upnpd?.natRules()).not.toContain(`dport ${m.external.port}`);
  }, 40_000);

  it.skipIf(why !== '')('a ring link these NATs would relay (symmetric NAT dialing a port-restricted one) forms as direct TCP to the mapped port', async () => {
    const l = lab as NatLab;
    const { url, port } = await startLabRendezvous(l, procs);
    // The symmetric member joins first, so it dials; the other's listener is mapped on its router.
    const r = await runPair(l, procs, url, await probeMembers(l, port), l.members.s as NatMember, l.members.m as NatMember);
    console.log(`symmetric -> port-restricted with UPnP: ${r.formed} in ${r.connectMs} ms (predicted without mapping: ${r.predictedKnownFiltering})`);
    expect(r.formed).toBe('direct-tcp');
  }, 60_000);
});
