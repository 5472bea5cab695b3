// ICE through emulated home routers, in network namespaces (test-support/netns-nat.ts): a
// full-cone, an address-restricted, a port-restricted and a symmetric NAT with one member each,
// one port-restricted NAT with two members on one LAN, and two full-cone NATs with a LAN per
// member (one hairpinning, one not), all behind a "public" namespace that routes between them
// and runs the rendezvous (its STUN service on two public addresses, as RFC 5780 needs) and the
// host. Members' host candidates are unreachable from other homes; only
// hole punching through both NATs gives a direct path.
//   - every member's NAT mapping, measured with RFC 5780's full test and with the member's own
//     probe (rendezvous/stun-nat.ts), matches its router;
//   - every ordered pair of kinds forms what the NATs allow: direct UDP, except a symmetric NAT
//     against a symmetric or port-restricted one, which relays (the pair table, also printed; the
//     planner's per-pair prediction is compared with it);
//   - two members behind one full-cone NAT on separate LANs (forwarding between them dropped)
//     link directly over UDP through the router's public address when it hairpins, and relay
//     when it does not;
//   - a host behind a NAT measures its own against the public rendezvous (its status's host_nat);
//   - generation through a ring with a direct and a relayed edge over these NATs gives exactly the
//     tokens of one machine.
// One lab for the whole file. Needs root, iproute2 and nftables; skipped, saying why, where
// namespaces cannot be made.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { HAIRPIN_PAIRS, labPairs, PAIR_LAB, pairTable, pooled, probeMembers, runPair, startLabRendezvous, type MemberNat, type PairResult } from '../test-support/nat-pairs.js';
import { requireNft } from '../test-support/netns-faults.js';
import { createNatLab, hairpinnedPackets, type NatLab, type NatMember } from '../test-support/netns-nat.js';
import { canUseNetns, netnsSkipNote } from '../test-support/netns-star.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Event, until, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const usable = canUseNetns();
if (usable) requireNft();
const procs = new ProcessSet();
isolatedCacheDir('kiwi-ice-nat-');
let lab: NatLab | undefined;
let url = '';
let nats: Record<string, MemberNat> = {};
// Removed also when the run dies before afterAll.
process.once('exit', () => lab?.tearDown());

beforeAll(async () => {
  if (!usable) return;
  lab = createNatLab(PAIR_LAB);
  const rv = await startLabRendezvous(lab, procs);
  url = rv.url;
  nats = await probeMembers(lab, rv.port);
}, 120_000);

afterAll(() => {
  procs.dispose();
  lab?.tearDown();
});

/** Completion text from the host's API, asked from inside the public namespace (the API listens on its loopback). */
async function completeIn(ns: string, apiUrl: string, prompt: string, maxTokens: number): Promise<string> {
  const body = JSON.stringify({ model: 'stories260K', prompt, max_tokens: maxTokens, temperature: 0 });
  const script = `const r = await fetch(${JSON.stringify(`${apiUrl}/completions`)}, { method: 'POST', headers: { 'content-type': 'application/json' }, body: ${JSON.stringify(body)} });` +
    'if (!r.ok) throw new Error(String(r.status) + await r.text()); console.log(JSON.stringify((await r.json()).choices[0].text));';
  const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', script], { cwd: repoRoot });
  return JSON.parse(stdout.trim()) as string;
}

/** The control API's status of a process in `ns` (it listens on that namespace's loopback). */
async function statusIn(ns: string, apiUrl: string, token: string): Promise<unknown> {
  const script = `const r = await fetch(${JSON.stringify(`${apiUrl}/status`)}, { headers: { authorization: ${JSON.stringify(`Bearer ${token}`)} } }); console.log(JSON.stringify(await r.json()));`;
  const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', script], { cwd: repoRoot });
  return JSON.parse(stdout.trim());
}

describe(`ICE through emulated NATs (network namespaces)${netnsSkipNote()}`, () => {
  it.skipIf(!usable)('measures each member\'s NAT mapping as its router\'s kind (RFC 5780 over two addresses, and the member\'s own probe)', () => {
    const l = lab as NatLab;
    for (const m of Object.values(l.members)) {
      const nat = nats[m.name] as MemberNat;
      const symmetric = m.kind === 'symmetric';
      expect([m.name, nat.rfc5780]).toEqual([m.name, symmetric ? 'address-and-port-dependent' : 'endpoint-independent']);
      // Measured as the planner's class, mapped to the router's public address.
      expect([m.name, nat.member.mapping, nat.member.natClass]).toEqual([m.name, ...(symmetric ? ['address-dependent', 'restrictive'] : ['endpoint-independent', 'permissive'])]);
      expect(nat.member.mapped.address).toBe(m.wan);
    }
  });

  it.skipIf(!usable)('forms the link every ordered pair of NAT kinds allows, and prints the pair table', async () => {
    const l = lab as NatLab;
    const rows: PairResult[] = await pooled(labPairs(), 4, async ([a, b]) => runPair(l, procs, url, nats, l.members[a]!, l.members[b]!));
    process.stdout.write(`\nNAT pair table (initiator joins first):\n${pairTable(rows)}\n`);
    for (const r of rows) {
      // What the routers allow: a symmetric NAT's port toward the peer is new, so only a NAT that
      // lets in any port of an address it sent to (full cone, address-restricted) takes its punch.
      const strict = (k: string): boolean => k === 'symmetric' || k === 'port-restricted';
      const symmetricVsStrict = (r.kinds[0] === 'symmetric' && strict(r.kinds[1])) || (r.kinds[1] === 'symmetric' && strict(r.kinds[0]));
      expect([r.a, r.b, r.formed]).toEqual([r.a, r.b, symmetricVsStrict && !r.sameNat ? 'relayed' : 'direct-udp']);
      expect(r.connectMs).toBeGreaterThan(0);
      // Knowing each NAT's filtering, the planner's per-pair prediction is exact; from mappings
      // alone it errs only towards the relay (as Kafila's did).
      expect([r.a, r.b, r.predictedKnownFiltering]).toEqual([r.a, r.b, r.formed]);
      if (r.predicted !== r.formed) expect([r.a, r.b, r.predicted, r.formed]).toEqual([r.a, r.b, 'relayed', 'direct-udp']);
    }
  }, 400_000);

  it.skipIf(!usable)('links two members behind one NAT on separate LANs through its public address when it hairpins, and relays when it does not', async () => {
    const l = lab as NatLab;
    const pairs = HAIRPIN_PAIRS.map(([a, b]) => [l.members[a] as NatMember, l.members[b] as NatMember] as const);
    const router = pairs[0]![0].routerNs;
    const before = hairpinnedPackets(router);
    const rows = await Promise.all(pairs.map(async ([a, b]) => runPair(l, procs, url, nats, a, b)));
    process.stdout.write(`\nHairpin rows:\n${pairTable(rows)}\n`);
    expect(rows.map((r) => [r.a, r.b, r.sameNat, r.formed])).toEqual([['hairpin-1', 'hairpin-2', true, 'direct-udp'], ['no-hairpin-1', 'no-hairpin-2', true, 'relayed']]);
    // LAN to LAN is dropped, so the direct path is the hairpin: packets to the router's public
    // address at a member's mapping, DNATed from the LAN side to the mapping's owner.
    expect(hairpinnedPackets(router)).toBeGreaterThan(before);
  }, 120_000);

  it.skipIf(!usable)("measures a host's own NAT against the public rendezvous, as its status shows it", async () => {
    const l = lab as NatLab;
    const shown = await Promise.all((['symmetric', 'full-cone'] as const).map(async (who) => {
      const ns = l.members[who]!.ns;
      const host = procs.spawn('ip', ['netns', 'exec', ns, process.execPath, ...kiwiEntry(), 'host', '--rendezvous', url, '--auto-approve', '--listen', '0.0.0.0', '--no-bench', '--json']);
      const control = await waitEvent(host, (e) => e.event === 'control', 'the host control API', 60_000);
      const token = (JSON.parse(await readFile(control.token_file as string, 'utf8')) as { token: string }).token;
      let nat: unknown = null;
      await until(async () => {
        nat = ((await statusIn(ns, control.api_url as string, token)) as { host_nat?: unknown }).host_nat ?? null;
        return nat !== null;
      }, `the NAT of the host behind the ${who} router`, 30_000);
      host.child.kill('SIGKILL');
      return [who, nat];
    }));
    expect(shown).toEqual([
      ['symmetric', { mapping: 'address-dependent', filtering: null, port_mapping: null }],
      ['full-cone', { mapping: 'endpoint-independent', filtering: null, port_mapping: null }],
    ]);
  }, 120_000);

  it.skipIf(!usable)('generates through a ring with a direct and a relayed edge over the NATs exactly what one machine does', async () => {
    const l = lab as NatLab;
    const model = await testModelPath('stories260K.gguf');
    const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '32', '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
    const want = (JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string }).text;
    const inNs = (ns: string, ...args: string[]) => procs.spawn('ip', ['netns', 'exec', ns, process.execPath, ...kiwiEntry(), ...args, '--json']);
    const host = inNs(l.pub, 'host', '--model', model, '--port', '0', '--rendezvous', url, '--auto-approve', '--expect', '2', '--listen', '0.0.0.0', '--no-bench');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    // Port-restricted and symmetric: the edge between them relays, the host's (public) edges go direct.
    for (const [name, who] of [['ada', 'port-restricted'], ['bob', 'symmetric']] as const) {
      inNs(l.members[who]!.ns, 'join', code, '--rendezvous', url, '--name', name, '--model', model, '--listen', '0.0.0.0', '--no-bench');
    }
    const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 90_000);
    const latest = new Map<string, Event>();
    await until(async () => {
      for (const e of host.events) if (e.event === 'link' && typeof e.rtt_ms === 'number') latest.set(`${String(e.a)}-${String(e.b)}`, e);
      return latest.size === 3;
    }, 'three measured ring links', 60_000);
    const kinds = [...latest.entries()].sort().map(([pair, e]) => [pair.startsWith('0-') ? 'host' : 'members', e.kind, e.transport]);
    expect(kinds).toEqual([['host', 'direct', 'udp'], ['host', 'direct', 'udp'], ['members', 'relayed', 'relay']]);
    expect(await completeIn(l.pub, serving.url as string, 'Once upon a time', 32)).toBe(want);
  }, 240_000);
});
