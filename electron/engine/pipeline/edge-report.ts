// What each ring edge became next to what the planner predicted (pure): the prediction is the
// plan's (planner/nat-reach.ts, made when the ring was planned), the outcome is the kind the link
// came up as (session/link-manager.ts: ICE over UDP, WebSocket over TCP, the relay). The same link
// outcomes are the punch experiments that show each member's NAT filtering (planner/nat-filtering.ts),
// which the next plan uses.
import type { EdgeWire, MemberNatWire } from '../../../common/control-api.js';
import type { NatFiltering, NatMapping, Reach } from '../planner/nat-reach.js';
import { inferFiltering, type PunchOutcome } from '../planner/nat-filtering.js';
import type { PlanJson } from '../planner/plan-json.js';
import type { SessionStatus } from '../session/host-session.js';

type SessionView = Pick<SessionStatus, 'members' | 'ring' | 'links'>;
type LinkView = SessionStatus['links'][number];

export interface EdgeReport {
  /** The pair's peers in ring order (a before b; the last edge closes the ring back to the host). */
  a: number;
  b: number;
  /** What the plan predicted; undefined when the plan does not cover the pair (a member joined since). */
  predicted: Reach | undefined;
  /** What the link became; undefined until it is up. */
  actual: Reach | undefined;
  rttMs: number | undefined;
  /** Both known: whether they agree. */
  matched: boolean | undefined;
}

export interface MemberNat {
  peer: number;
  mapping: NatMapping | undefined;
  filtering: NatFiltering | undefined;
}

const pairKey = (x: number, y: number): string => `${Math.min(x, y)}-${Math.max(x, y)}`;

/** The kind a link that is up runs over. */
export function linkReach(l: Pick<LinkView, 'state' | 'kind' | 'transport'>): Reach | undefined {
  if (l.state !== 'up') return undefined;
  if (l.transport === 'udp') return 'direct-udp';
  if (l.transport === 'tcp') return 'direct-tcp';
  if (l.transport === 'relay' || l.kind === 'relayed') return 'relayed';
  return undefined;
}

/** The ring's edges, each with its predicted and its actual kind. */
export function edgeReport(s: { plan: PlanJson | undefined; session: SessionView }): EdgeReport[] {
  const ring = s.session.ring;
  if (ring.length < 2) return [];
  const predicted = predictedByPair(s.plan, s.session);
  const links = new Map(s.session.links.map((l) => [pairKey(l.a, l.b), l]));
  const edges: EdgeReport[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < ring.length; i++) {
    const a = ring[i] as number;
    const b = ring[(i + 1) % ring.length] as number;
    const key = pairKey(a, b);
    if (seen.has(key)) continue;
    seen.add(key);
    const link = links.get(key);
    const actual = link !== undefined ? linkReach(link) : undefined;
    const p = predicted.get(key);
    edges.push({ a, b, predicted: p, actual, rttMs: link?.state === 'up' ? link.rttMs : undefined, matched: p !== undefined && actual !== undefined ? p === actual : undefined });
  }
  return edges;
}

/** The plan's predictions by peer pair: the plan names devices, the session numbers peers. */
function predictedByPair(plan: PlanJson | undefined, session: SessionView): Map<string, Reach> {
  const out = new Map<string, Reach>();
  if (plan === undefined) return out;
  // The session's ring is the plan's order (the host, its head, first) while that plan is served;
  // otherwise names find the peers.
  const byName = new Map<string, number>(session.members.map((m) => [m.name, m.peer]));
  const sameRing = plan.order.length === session.ring.length;
  const peerOf = (name: string): number | undefined => (sameRing ? session.ring[plan.order.indexOf(name)] : name === plan.head ? 0 : byName.get(name));
  for (const e of plan.edges) {
    const a = peerOf(e.from);
    const b = peerOf(e.to);
    if (a !== undefined && b !== undefined && !out.has(pairKey(a, b))) out.set(pairKey(a, b), e.predicted);
  }
  return out;
}

function mappingOf(capabilities: Readonly<Record<string, unknown>> | undefined): NatMapping | undefined {
  const m = capabilities?.nat_mapping;
  return m === 'endpoint-independent' || m === 'address-dependent' ? m : undefined;
}

/**
 * Each member's measured mapping and the filtering its punches showed. A member reports a mapping
 * only when it takes ICE links (session/member.ts), so a link between two members with mappings
 * that came up over TCP or the relay is an ICE attempt that failed.
 */
export function memberNat(session: SessionView): MemberNat[] {
  const mapping = new Map(session.members.map((m) => [m.peer, mappingOf(m.capabilities)]));
  return session.members.map((m) => {
    const own = mapping.get(m.peer);
    const outcomes: PunchOutcome[] = [];
    for (const l of session.links) {
      if (l.a !== m.peer && l.b !== m.peer) continue;
      const peerMapping = mapping.get(l.a === m.peer ? l.b : l.a);
      const reach = linkReach(l);
      if (own === undefined || peerMapping === undefined || reach === undefined) continue;
      outcomes.push({ peerMapping, succeeded: reach === 'direct-udp' });
    }
    return { peer: m.peer, mapping: own, filtering: inferFiltering(own, outcomes) };
  });
}

/** A member's capabilities with the filtering its punches showed (`nat_filtering`), for the planner. */
export function withPunchFiltering(
  capabilities: Readonly<Record<string, unknown>> | undefined,
  peer: number,
  session: SessionView,
): Readonly<Record<string, unknown>> | undefined {
  if (capabilities === undefined || capabilities.nat_filtering !== undefined) return capabilities;
  const filtering = memberNat(session).find((n) => n.peer === peer)?.filtering;
  return filtering === undefined ? capabilities : { ...capabilities, nat_filtering: filtering };
}

/** The edges and members' NATs as the control API's plan carries them (common/control-api.ts PlanWire). */
export function edgeReportWire(s: { plan: PlanJson | undefined; session: SessionView }): { edges: EdgeWire[]; nat: MemberNatWire[] } {
  return {
    edges: edgeReport(s).map((e) => ({ a: e.a, b: e.b, predicted: e.predicted ?? null, actual: e.actual ?? null, rtt_ms: e.rttMs ?? null, matched: e.matched ?? null })),
    nat: memberNat(s.session).map((n) => ({ peer: n.peer, mapping: n.mapping ?? null, filtering: n.filtering ?? null })),
  };
}
