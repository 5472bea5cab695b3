// An idle ICE link keeps its NAT binding (issue 19: "UDP keepalives inside the NAT binding
// timeout"). A member behind a symmetric NAT (test-support/netns-nat.ts) links directly to a peer
// in the public namespace; the router forgets UDP mappings after UDP_TIMEOUT_S (conntrack's UDP
// timeouts, per namespace), far below a home router's 20-30 s. A symmetric NAT gives a forgotten
// mapping a new random port, so a lapse would move the member's address and drop what the public
// peer sends to the old one. libjuice checks consent on the selected pair every 4-6 s (RFC 7675),
// from both sides, which keeps the mapping; the link then stays on the same direct pair through
// an idle time of several timeouts and carries a message each way. (Measured here over 20 s idle:
// the member sent 4 binding requests and answered 3 of the peer's, about one packet every 2-3 s
// through the NAT. With the timeout set below the consent period, 2 s, this test fails: the
// public side's message never arrives.) No application-level keepalive is needed on top.
// Needs root, iproute2 and nftables; skipped, saying why, where namespaces cannot be made.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNft } from '../test-support/netns-faults.js';
import { createNatLab, type NatLab } from '../test-support/netns-nat.js';
import { canUseNetns, netnsSkipNote } from '../test-support/netns-star.js';
import { sendOn, spawnIcePeer, wireIcePeers, type IceRouteEvent } from '../test-support/ice-peers.js';
import { ProcessSet, waitEvent } from '../test-support/processes.js';

/** The router's UDP mapping lifetime: above libjuice's consent period (at most 6 s), far below a home router's. */
const UDP_TIMEOUT_S = 8;
/** Idle time: over two mapping lifetimes. */
const IDLE_MS = 20_000;

const usable = canUseNetns();
if (usable) requireNft();
const procs = new ProcessSet();
let lab: NatLab | undefined;
process.once('exit', () => lab?.tearDown());

beforeAll(() => {
  if (!usable) return;
  const tag = String(process.pid % 100000);
  lab = createNatLab([{ kind: 'symmetric', members: ['m'] }], tag);
  const router = `kiwi-nat1-${tag}`;
  for (const key of ['nf_conntrack_udp_timeout', 'nf_conntrack_udp_timeout_stream']) {
    execFileSync('ip', ['netns', 'exec', router, 'sysctl', '-qw', `net.netfilter.${key}=${UDP_TIMEOUT_S}`], { stdio: 'pipe' });
  }
});

afterAll(() => {
  procs.dispose();
  lab?.tearDown();
});

describe(`ICE keepalive through a NAT with short UDP timeouts (network namespaces)${netnsSkipNote()}`, () => {
  it.skipIf(!usable)(`keeps a direct link idle for ${IDLE_MS / 1000} s over a ${UDP_TIMEOUT_S} s NAT mapping timeout, on the same candidate pair`, async () => {
    const l = lab as NatLab;
    const member = spawnIcePeer(procs, l.members.m!.ns, 'initiator');
    const pub = spawnIcePeer(procs, l.pub, 'responder');
    wireIcePeers(member, pub);
    const opened = await Promise.all([member, pub].map((p) => waitEvent(p, (e) => e.event === 'open' || e.event === 'closed', 'the link to open', 20_000)));
    expect(opened.map((e) => e.event)).toEqual(['open', 'open']);
    const [mRoute, pRoute] = opened.map((e) => e.route as IceRouteEvent);
    // Direct: no relay candidate on either side; the public peer sees the member at its router's address.
    expect([mRoute!.local.type, pRoute!.local.type]).not.toContain('relay');
    expect(pRoute!.remote.address).toBe(l.members.m!.wan);
    await new Promise((r) => setTimeout(r, IDLE_MS));
    // After the idle time the public side speaks first: it reaches the member only if the router still maps the old port.
    sendOn(pub, 'from the public side');
    const got = await waitEvent(member, (e) => e.event === 'data' || e.event === 'closed', 'the message after the idle time', 15_000);
    expect(got.text).toBe('from the public side');
    sendOn(member, 'from the member');
    const back = await waitEvent(pub, (e) => e.event === 'data' || e.event === 'closed', 'the reply', 15_000);
    expect(back.text).toBe('from the member');
    // The same direct pair: the member's mapped port never moved.
    expect((back.route as IceRouteEvent).remote).toEqual(pRoute!.remote);
    expect(member.events.some((e) => e.event === 'closed') || pub.events.some((e) => e.event === 'closed')).toBe(false);
  }, 60_000);
});
