// The NAT pair table (issue 19, Kafila's Table III): for every ordered pair of NAT kinds, a real
// session (the rendezvous and `kiwi host` in the public namespace of netns-nat.ts, a `kiwi join`
// behind each of the two NATs) and what the link between the two members became: direct UDP (an
// ICE hole punch), direct TCP (a WebSocket dial) or relayed, how long it took, and what the
// planner's per-pair prediction (planner/nat-reach.ts) said from each member's measured NAT.
// The first member of a pair joins first, so it is the link's initiator. Shared by
// transport/ice-nat.netns.process.test.ts and bench/nat-pairs.ts.
import { execFile } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import type { DeviceSpec } from '../planner/fleet.js';
import { predictReach, type NatFiltering, type Reach } from '../planner/nat-reach.js';
import type { NatKind, NatLab, NatMember, RouterSpec } from './netns-nat.js';
import { kiwiEntry, type ProcessSet, type Proc, repoRoot, tsEntry, waitEvent } from './processes.js';

const run = promisify(execFile);

/**
 * One router per kind with one member each, one port-restricted router with two members on one
 * LAN (they meet over it), and two full-cone routers with a LAN per member: one hairpinning, one
 * not (netns-nat.ts's separateLans).
 */
export const PAIR_LAB: readonly RouterSpec[] = [
  { kind: 'full-cone', members: ['full-cone'] },
  { kind: 'address-restricted', members: ['address-restricted'] },
  { kind: 'port-restricted', members: ['port-restricted'] },
  { kind: 'symmetric', members: ['symmetric'] },
  { kind: 'port-restricted', members: ['same-nat-1', 'same-nat-2'] },
  { kind: 'full-cone', members: ['hairpin-1', 'hairpin-2'], separateLans: true, hairpin: true },
  { kind: 'full-cone', members: ['no-hairpin-1', 'no-hairpin-2'], separateLans: true, hairpin: false },
];

/** Two members behind one NAT on separate LANs: through a hairpinning router, and through one that does not hairpin. */
export const HAIRPIN_PAIRS: ReadonlyArray<readonly [string, string]> = [['hairpin-1', 'hairpin-2'], ['no-hairpin-1', 'no-hairpin-2']];

/** Every ordered pair of the four kinds, then the two members behind one NAT. */
export function labPairs(): Array<[string, string]> {
  const kinds = PAIR_LAB.slice(0, 4).map((r) => r.members[0] as string);
  return [...kinds.flatMap((a) => kinds.map((b) => [a, b] as [string, string])).filter(([a, b]) => a !== b), ['same-nat-1', 'same-nat-2']];
}

export interface MemberNat {
  /** RFC 5780 §4.3 against the rendezvous's two addresses. */
  rfc5780: 'endpoint-independent' | 'address-dependent' | 'address-and-port-dependent';
  /** What the member itself measures for its capabilities (rendezvous/stun-nat.ts). */
  member: { mapping: string; natClass: string | undefined; mapped: { address: string; port: number } };
}

export interface PairResult {
  a: string;
  b: string;
  kinds: [NatKind, NatKind];
  sameNat: boolean;
  /** What formed; 'failed' when no link came up at all. */
  formed: Reach | 'failed';
  /** From the second member's join to the initiator's link being up (ms). */
  connectMs: number | null;
  /** nat-reach.ts from the members' measured mappings alone (filtering not yet known). */
  predicted: Reach;
  /** nat-reach.ts with each router's filtering known too (as punch outcomes reveal it). */
  predictedKnownFiltering: Reach;
  /** Kafila's expectation for the kinds: only symmetric against symmetric or port-restricted relays. */
  kafila: 'direct' | 'relayed';
}

/** A process's stdout lines' arrival times, index for index with its events. */
function stamps(p: Proc): number[] {
  const at: number[] = [];
  if (p.child.stdout !== null) createInterface({ input: p.child.stdout }).on('line', () => at.push(performance.now()));
  return at;
}

export function kafilaExpectation(a: NatKind, b: NatKind): 'direct' | 'relayed' {
  const hard = (k: NatKind): boolean => k === 'symmetric' || k === 'port-restricted';
  return (a === 'symmetric' && hard(b)) || (b === 'symmetric' && hard(a)) ? 'relayed' : 'direct';
}

const FILTERING: Record<NatKind, NatFiltering> = { 'full-cone': 'lenient', 'address-restricted': 'lenient', 'port-restricted': 'port-dependent', symmetric: 'port-dependent' };

function device(name: string, nat: MemberNat, kind: NatKind | undefined): DeviceSpec {
  const mapping = nat.member.mapping === 'endpoint-independent' || nat.member.mapping === 'address-dependent' ? nat.member.mapping : undefined;
  return { name, memoryBytes: 1, ...(mapping !== undefined ? { natMapping: mapping } : {}), ...(kind !== undefined ? { natFiltering: FILTERING[kind] } : {}) };
}

/** Starts the lab's rendezvous (two STUN addresses) in the public namespace; its ws:// URL at the first address. */
export async function startLabRendezvous(lab: NatLab, procs: ProcessSet): Promise<{ url: string; port: number }> {
  const rv = procs.spawn('ip', [...lab.exec(lab.pub).slice(1), process.execPath, ...tsEntry('electron/engine/test-support/nat-rendezvous.ts'), ...lab.pubAddrs]);
  const port = (await waitEvent(rv, (e) => e.event === 'listening', 'the lab rendezvous')).port as number;
  return { url: `ws://${lab.pubAddrs[0]}:${port}`, port };
}

/** Each member's NAT as measured from inside its namespace (nat-probe.ts), probed in parallel. */
export async function probeMembers(lab: NatLab, port: number): Promise<Record<string, MemberNat>> {
  const entries = await Promise.all(Object.values(lab.members).map(async (m) => {
    const args = [...lab.exec(m.ns).slice(1), process.execPath, ...tsEntry('electron/engine/test-support/nat-probe.ts'), lab.pubAddrs[0], String(port)];
    const { stdout } = await run('ip', args, { cwd: repoRoot });
    return [m.name, JSON.parse(stdout.trim().split('\n').pop() as string) as MemberNat] as const;
  }));
  return Object.fromEntries(entries);
}

const kiwiIn = (procs: ProcessSet, lab: NatLab, ns: string, ...args: string[]): Proc =>
  procs.spawn('ip', [...lab.exec(ns).slice(1), process.execPath, ...kiwiEntry(), ...args, '--json']);

/** One session for one ordered pair: a's member joins first (the initiator), then b's. */
export async function runPair(lab: NatLab, procs: ProcessSet, url: string, nats: Record<string, MemberNat>, a: NatMember, b: NatMember): Promise<PairResult> {
  const host = kiwiIn(procs, lab, lab.pub, 'host', '--rendezvous', url, '--auto-approve', '--listen', '0.0.0.0', '--no-bench');
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 60_000)).code as string;
  const first = kiwiIn(procs, lab, a.ns, 'join', code, '--rendezvous', url, '--name', 'ada', '--listen', '0.0.0.0', '--no-bench');
  const firstAt = stamps(first);
  const peerA = (await waitEvent(first, (e) => e.event === 'joined', 'the first member joined', 60_000)).peer as number;
  const second = kiwiIn(procs, lab, b.ns, 'join', code, '--rendezvous', url, '--name', 'bob', '--listen', '0.0.0.0', '--no-bench');
  const secondAt = stamps(second);
  const joined = await waitEvent(second, (e) => e.event === 'joined', 'the second member joined', 60_000);
  const peerB = joined.peer as number;
  const joinedAt = secondAt[second.events.indexOf(joined)] as number;
  const [lo, hi] = [Math.min(peerA, peerB), Math.max(peerA, peerB)];
  // The initiator's own report once the link is up (and measured), or the host's report of a failure.
  const up = (e: { event?: string; peer?: unknown; rtt_ms?: unknown }): boolean => e.event === 'link' && e.peer === peerB && typeof e.rtt_ms === 'number';
  const failed = (e: Record<string, unknown>): boolean => e.event === 'link' && e.a === lo && e.b === hi && e.state === 'failed';
  await Promise.race([waitEvent(first, up, 'the member-to-member link', 90_000), waitEvent(host, failed, 'the member-to-member link', 90_000)]);
  const link = first.events.find(up);
  const formed: Reach | 'failed' = link === undefined ? 'failed' : link.kind === 'relayed' ? 'relayed' : link.transport === 'udp' ? 'direct-udp' : 'direct-tcp';
  const connectMs = link === undefined ? null : Math.round((firstAt[first.events.indexOf(link)] as number) - joinedAt);
  for (const p of [second, first, host]) p.child.kill('SIGKILL');
  const natA = nats[a.name] as MemberNat;
  const natB = nats[b.name] as MemberNat;
  return {
    a: a.name, b: b.name, kinds: [a.kind, b.kind], sameNat: a.router === b.router, formed, connectMs,
    predicted: predictReach(device(a.name, natA, undefined), device(b.name, natB, undefined)),
    predictedKnownFiltering: predictReach(device(a.name, natA, a.kind), device(b.name, natB, b.kind)),
    kafila: kafilaExpectation(a.kind, b.kind),
  };
}

/** Runs `work` over `items` with at most `limit` at once, results in item order. */
export async function pooled<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await work(items[i] as T);
    }
  }));
  return out;
}

const direct = (r: Reach | 'failed'): 'direct' | 'relayed' | 'failed' => (r === 'failed' ? r : r === 'relayed' ? 'relayed' : 'direct');

/** The pair table as text: one row per ordered pair, then how many predictions matched. */
export function pairTable(rows: readonly PairResult[]): string {
  const header = ['initiator', 'responder', 'formed', 'connect ms', 'predicted', 'match', 'with filtering', 'match', 'kafila', 'match'];
  const cells = rows.map((r) => [
    r.a, r.b, r.formed, r.connectMs === null ? '-' : String(r.connectMs),
    r.predicted, r.predicted === r.formed ? 'yes' : 'no',
    r.predictedKnownFiltering, r.predictedKnownFiltering === r.formed ? 'yes' : 'no',
    r.kafila, r.kafila === direct(r.formed) ? 'yes' : 'no',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] as string).length)));
  const line = (c: string[]): string => c.map((x, i) => x.padEnd(widths[i] as number)).join('  ').trimEnd();
  const count = (f: (r: PairResult) => boolean): string => `${rows.filter(f).length} of ${rows.length}`;
  return [
    line(header), ...cells.map(line), '',
    `predicted from measured mappings matched ${count((r) => r.predicted === r.formed)}; ` +
      `with filtering known ${count((r) => r.predictedKnownFiltering === r.formed)}; Kafila's expectation ${count((r) => r.kafila === direct(r.formed))}`,
  ].join('\n');
}
