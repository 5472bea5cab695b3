// ICE links use IPv6 where it is present (issue 19: "IPv6 candidates where present"). libjuice
// gathers on a dual-stack socket, offering a host candidate per address of either family, and
// ranks IPv6 host candidates above IPv4 ones. Two network namespaces on one veth:
//   - IPv6 only (no IPv4 route between them): the link forms over an IPv6 pair;
//   - dual stack: both families are offered and the selected pair is the IPv6 one.
// Peers run with the default configuration (no bind address). Needs root and iproute2; skipped,
// saying why, where namespaces cannot be made.
import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { sendOn, spawnIcePeer, wireIcePeers, type IceRouteEvent } from '../test-support/ice-peers.js';
import { canUseNetns, netnsSkipNote } from '../test-support/netns-star.js';
import { ProcessSet, waitEvent, type Proc } from '../test-support/processes.js';

const usable = canUseNetns();
const procs = new ProcessSet();
const tag = String(process.pid % 100000);
const made: string[] = [];
const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });
const tearDown = (): void => {
  for (const ns of made.splice(0)) {
    try {
      ip('netns', 'del', ns);
    } catch {
      // Already gone.
    }
  }
};
process.once('exit', tearDown);

afterAll(() => {
  procs.dispose();
  tearDown();
});

/** Two namespaces on one veth: fd79:N::1 and ::2 (no duplicate-address wait), plus 10.78.N.1/.2 when dual. */
function pair(n: number, dual: boolean): [string, string] {
  const names = [`kiwi-v6${n}a-${tag}`, `kiwi-v6${n}b-${tag}`] as const;
  for (const ns of names) {
    ip('netns', 'add', ns);
    made.push(ns);
    ip('-n', ns, 'link', 'set', 'lo', 'up');
  }
  ip('link', 'add', `k${tag}v${n}a`, 'type', 'veth', 'peer', 'name', `k${tag}v${n}b`);
  names.forEach((ns, i) => {
    const dev = `k${tag}v${n}${i === 0 ? 'a' : 'b'}`;
    ip('link', 'set', dev, 'netns', ns);
    ip('-n', ns, '-6', 'addr', 'add', `fd79:${n}::${i + 1}/64`, 'dev', dev, 'nodad');
    if (dual) ip('-n', ns, 'addr', 'add', `10.78.${n}.${i + 1}/24`, 'dev', dev);
    ip('-n', ns, 'link', 'set', dev, 'up');
  });
  return [...names];
}

/**
 * Opens a link between peers in the two namespaces and sends one message over it; returns the
 * pair the initiator's ICE nominated and the candidates offered. Not the pair at open: the channel
 * opens on the first pair that answers, which with trickled candidates can be the IPv4 one, and
 * ICE moves to the better pair before it nominates.
 */
async function link([nsA, nsB]: [string, string]): Promise<{ route: IceRouteEvent; candidates: string[] }> {
  const a: Proc = spawnIcePeer(procs, nsA, 'initiator');
  const b: Proc = spawnIcePeer(procs, nsB, 'responder');
  wireIcePeers(a, b);
  const opened = await Promise.all([a, b].map((p) => waitEvent(p, (e) => e.event === 'open' || e.event === 'closed', 'the link to open', 20_000)));
  expect(opened.map((e) => e.event)).toEqual(['open', 'open']);
  sendOn(a, 'over IPv6');
  expect((await waitEvent(b, (e) => e.event === 'data', 'the message')).text).toBe('over IPv6');
  const settled = await waitEvent(a, (e) => e.event === 'settled', 'ICE to nominate a pair', 10_000);
  const candidates = [a, b].flatMap((p) => p.events.flatMap((e) => (e.event === 'signal' && (e.signal as { kind: string }).kind === 'candidate' ? [(e.signal as { candidate: string }).candidate] : [])));
  return { route: settled.route as IceRouteEvent, candidates };
}

describe(`ICE over IPv6 (network namespaces)${netnsSkipNote()}`, () => {
  it.skipIf(!usable)('forms a link between two members that have only IPv6 addresses', async () => {
    const { route } = await link(pair(1, false));
    expect([route.local.address, route.remote.address]).toEqual(['fd79:1::1', 'fd79:1::2']);
    expect(route.local.type).toBe('host');
  }, 40_000);

  it.skipIf(!usable)('offers candidates of both families on a dual-stack network and selects the IPv6 pair', async () => {
    const { route, candidates } = await link(pair(2, true));
    expect(candidates.some((c) => c.includes(' 10.78.2.'))).toBe(true);
    expect(candidates.some((c) => c.includes(' fd79:2::'))).toBe(true);
    expect([route.local.address, route.remote.address]).toEqual(['fd79:2::1', 'fd79:2::2']);
  }, 40_000);
});
