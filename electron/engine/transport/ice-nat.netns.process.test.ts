// ICE through emulated home routers, in network namespaces: two members, each on its own LAN
// behind its own NAT router (nftables masquerade), a "public" namespace in between that routes
// and runs the rendezvous (with its STUN service) and the host. Members' host candidates are
// unreachable from each other; only hole punching through both NATs gives a direct path.
//   - endpoint-independent mapping (plain masquerade, which keeps the source port): the member to
//     member link forms as direct UDP;
//   - symmetric (masquerade `random`: a new port per destination): punching fails, the WebSocket
//     dial to a private address fails, and the link is relayed by the rendezvous.
// Each member's NAT mapping, measured against the rendezvous's two STUN ports, matches its router.
// Needs root, iproute2 and nftables; skipped, saying why, where namespaces cannot be made.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { requireNft } from '../test-support/netns-faults.js';
import { canUseNetns, netnsSkipNote } from '../test-support/netns-star.js';
import { kiwiEntry, ProcessSet, repoRoot, type Event, type Proc, until, waitEvent } from '../test-support/processes.js';

const usable = canUseNetns();
if (usable) requireNft();
const procs = new ProcessSet();
const tag = String(process.pid % 100000);
const ns = { pub: `kiwi-pub-${tag}`, natA: `kiwi-nata-${tag}`, natB: `kiwi-natb-${tag}`, a: `kiwi-ma-${tag}`, b: `kiwi-mb-${tag}` };
const PUB = '10.79.1.1';

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });
const inNs = (where: string, ...cmd: string[]): void => void execFileSync('ip', ['netns', 'exec', where, ...cmd], { stdio: 'pipe' });

function veth(a: string, aNs: string, aAddr: string, b: string, bNs: string, bAddr: string): void {
  ip('link', 'add', a, 'type', 'veth', 'peer', 'name', b);
  ip('link', 'set', a, 'netns', aNs);
  ip('link', 'set', b, 'netns', bNs);
  ip('-n', aNs, 'addr', 'add', aAddr, 'dev', a);
  ip('-n', bNs, 'addr', 'add', bAddr, 'dev', b);
  ip('-n', aNs, 'link', 'set', a, 'up');
  ip('-n', bNs, 'link', 'set', b, 'up');
}

/** pub <-> natA (10.79.1.0/24) <-> A (192.168.1.0/24); pub <-> natB (10.79.2.0/24) <-> B (192.168.2.0/24). */
function setUp(symmetric: boolean): void {
  for (const n of Object.values(ns)) ip('netns', 'add', n);
  for (const n of Object.values(ns)) ip('-n', n, 'link', 'set', 'lo', 'up');
  for (const [side, i] of [['A', 1], ['B', 2]] as const) {
    const nat = side === 'A' ? ns.natA : ns.natB;
    const member = side === 'A' ? ns.a : ns.b;
    veth(`k${tag}p${i}`, ns.pub, `10.79.${i}.1/24`, `k${tag}w${i}`, nat, `10.79.${i}.2/24`);
    veth(`k${tag}l${i}`, nat, `192.168.${i}.1/24`, `k${tag}m${i}`, member, `192.168.${i}.2/24`);
    ip('-n', nat, 'route', 'add', 'default', 'via', `10.79.${i}.1`);
    ip('-n', member, 'route', 'add', 'default', 'via', `192.168.${i}.1`);
    inNs(nat, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
    // The router: source NAT of everything leaving the WAN side; conntrack lets only replies back in.
    inNs(nat, 'nft', 'add', 'table', 'ip', 'kiwi_nat');
    inNs(nat, 'nft', 'add', 'chain', 'ip', 'kiwi_nat', 'post', '{ type nat hook postrouting priority 100; }');
    inNs(nat, 'nft', 'add', 'rule', 'ip', 'kiwi_nat', 'post', 'oifname', `k${tag}w${i}`, 'masquerade', ...(symmetric ? ['random'] : []));
    inNs(nat, 'nft', 'add', 'table', 'ip', 'kiwi_fw');
    inNs(nat, 'nft', 'add', 'chain', 'ip', 'kiwi_fw', 'forwarding', '{ type filter hook forward priority 0; policy drop; }');
    inNs(nat, 'nft', 'add', 'rule', 'ip', 'kiwi_fw', 'forwarding', 'iifname', `k${tag}l${i}`, 'accept');
    inNs(nat, 'nft', 'add', 'rule', 'ip', 'kiwi_fw', 'forwarding', 'ct', 'state', 'established,related', 'accept');
    // Unsolicited packets to the router itself are dropped (as a home router's firewall does) before
    // conntrack confirms an entry for them: otherwise a peer's early punch would take the tuple that
    // the member's own outgoing punch needs, and the NAT would move it to another port.
    inNs(nat, 'nft', 'add', 'chain', 'ip', 'kiwi_fw', 'incoming', '{ type filter hook input priority 0; policy accept; }');
    inNs(nat, 'nft', 'add', 'rule', 'ip', 'kiwi_fw', 'incoming', 'iifname', `k${tag}w${i}`, 'ct', 'state', 'new', 'drop');
  }
  inNs(ns.pub, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
}

function tearDown(): void {
  for (const n of Object.values(ns)) {
    try {
      ip('netns', 'del', n);
    } catch {
      // Not created (setup failed part way): nothing to remove.
    }
  }
}

const kiwiIn = (where: string, ...args: string[]): Proc => procs.spawn('ip', ['netns', 'exec', where, process.execPath, ...kiwiEntry(), ...args, '--json']);

afterEach(() => {
  procs.killAll();
  tearDown();
});
afterAll(() => procs.dispose());

/** A member's NAT mapping as it measures it against the rendezvous's two STUN ports (rendezvous/stun-nat.ts). */
function probeFrom(where: string, port: string): Record<string, unknown> {
  const script = `import { probeNatMapping } from ${JSON.stringify(join(repoRoot, 'electron/engine/rendezvous/stun-nat.ts'))};` +
    `console.log(JSON.stringify(await probeNatMapping({ host: ${JSON.stringify(PUB)}, port: ${port} })));`;
  const out = execFileSync('ip', ['netns', 'exec', where, process.execPath, '--import', 'tsx', '--input-type=module', '-e', script], { cwd: repoRoot, encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').pop() as string) as Record<string, unknown>;
}

/** The member-to-member ring link as the host reports it once measured, and each member's measured NAT mapping. */
async function memberLink(): Promise<{ link: Event; probes: Array<Record<string, unknown>> }> {
  const rv = kiwiIn(ns.pub, 'rendezvous', '--host', '0.0.0.0', '--port', '0');
  const port = new URL((await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string).port;
  const url = `ws://${PUB}:${port}`;
  const host = kiwiIn(ns.pub, 'host', '--rendezvous', url, '--auto-approve', '--listen', '0.0.0.0', '--no-bench');
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  const members = [kiwiIn(ns.a, 'join', code, '--rendezvous', url, '--name', 'ada', '--listen', '0.0.0.0', '--no-bench'), kiwiIn(ns.b, 'join', code, '--rendezvous', url, '--name', 'bob', '--listen', '0.0.0.0', '--no-bench')];
  const peers = await Promise.all(members.map(async (m) => (await waitEvent(m, (e) => e.event === 'joined', 'a member joined', 30_000)).peer as number));
  const [lo, hi] = [Math.min(...peers), Math.max(...peers)];
  let found: Event | undefined;
  await until(async () => {
    found = host.events.find((e) => e.event === 'link' && e.a === lo && e.b === hi && (typeof e.rtt_ms === 'number' || e.state === 'failed'));
    return found !== undefined;
  }, 'the member-to-member link', 60_000);
  return { link: found as Event, probes: [probeFrom(ns.a, port), probeFrom(ns.b, port)] };
}

describe(`ICE through emulated NATs (network namespaces)${netnsSkipNote()}`, () => {
  it.skipIf(!usable)('forms a direct UDP link between members behind two endpoint-independent NATs', async () => {
    setUp(false);
    const { link, probes } = await memberLink();
    expect(link).toMatchObject({ kind: 'direct', transport: 'udp' });
    // Measured as the planner's 'permissive' class, mapped to the router's public address.
    expect(probes.map((p) => [p.mapping, p.natClass])).toEqual([['endpoint-independent', 'permissive'], ['endpoint-independent', 'permissive']]);
    expect(probes.map((p) => (p.mapped as { address: string }).address)).toEqual(['10.79.1.2', '10.79.2.2']);
  }, 120_000);

  it.skipIf(!usable)('falls back to the relay between members behind two symmetric NATs', async () => {
    setUp(true);
    const { link, probes } = await memberLink();
    expect(link).toMatchObject({ kind: 'relayed', transport: 'relay' });
    expect(probes.map((p) => [p.mapping, p.natClass])).toEqual([['address-dependent', 'restrictive'], ['address-dependent', 'restrictive']]);
  }, 120_000);
});
