// The assignment step, pure: a planned ring order becomes each stage's status, each link's wire
// and the assign message each member gets under one epoch (what SessionHost sends before the
// weights); the plan's inputs come from the ring being served, so a re-plan keeps what devices
// hold; members' reports about their stage become its next status. Invariant: a stage's `receive`
// is what its previous stage sends (token ids into the first member when the host runs no blocks).
import type { DeviceSpec, ModelSizes, RunningRange } from '../planner/fleet.js';
import { withSegments, type PlanJson } from '../planner/plan-json.js';
import type { MemberView, SessionStatus } from '../session/host.js';
import type { ActivationEncoding, WireOptions } from '../transport/tensor-frame.js';
import type { LayerRange } from '../runtime/layer-range.js';
import type { WeightLayout } from '../runtime/weights/convert.js';
import { splitAt, stageChange } from '../runtime/stage-segments.js';
import { CUT_MIN_BYTES, withFaultCuts } from './fault-cuts.js';
import { chooseLinkWire, type WirePolicy } from './link-wire.js';
import type { Assign, MemberToHostBody } from './ring-protocol.js';
import { planRing, type RingStage } from './session-fleet.js';

export interface StageStatus {
  peer: number;
  name: string;
  start: number;
  end: number;
  head: boolean;
  /** opening: its weights are in and its stage opens (steps sent to it wait); kept: ready with the stage it already ran (same layers as before the re-plan). */
  state: 'assigned' | 'loading' | 'opening' | 'ready' | 'kept' | 'failed';
  source?: 'local' | 'cache' | 'url' | 'host-http' | 'host' | 'kept';
  /** How this stage encodes the activations it sends on to the next one. */
  wire?: WireOptions;
  transferredBytes?: number;
  loadMs?: number;
  /** The sessions the host's stage runs in (more than one: reshaped or opened split), and the layers it opened anew; members report theirs in their own events. */
  segments?: number;
  openedLayers?: number;
}

type SessionLinks = SessionStatus['links'];

/** The ring being served, as far as planning the next one needs it. */
export interface ServedOrder {
  /** Stages in ring order, the host's first. */
  order: readonly RingStage[];
  /** The member of each stage after the host's. */
  memberIds: readonly string[];
}

export interface RingPlanInput {
  /** Members the plan may use (eligible, within their budgets); their capabilities and addresses predict their links' kinds. */
  members: readonly MemberView[];
  /** Memory members asked to be planned with (short of free memory), by member id. */
  memoryLimits: ReadonlyMap<string, number>;
  /** Block and step times the ring measured (stage-drift-monitor.ts), by member id, the host's under '': they replace the reported ones. */
  measuredBlockMs?: ReadonlyMap<string, { blockMs: number; stepMs: number }>;
  /** The ring's measured cost per hop beyond the links' one-way times (stage-drift-monitor.ts hopMs), priced for every device. */
  measuredHopMs?: number | undefined;
  /** The share of the bottleneck the re-plan may give up to keep what devices hold (stage-drift-monitor.ts moveMargin); absent: the planner's. */
  moveMargin?: number | undefined;
  /** Whether stages (the host's and members') may grow in place (stage-drift-monitor.ts growInPlace; absent: they may, unless the device has a memory budget). */
  growInPlace?: boolean;
  serving: ServedOrder | undefined;
  /** Plans stages as if they could keep any of their blocks, and adds no fault cuts (fault-cuts.ts asks with it). */
  everyCut?: boolean;
  /** The weight bytes a fault cut must spare (fault-cuts.ts); default CUT_MIN_BYTES. */
  cutMinBytes?: number;
  /** Layers members reported holding on disk (their stage, built layers and standby layers, standby-host.ts), by member id: planned as held. */
  standbyHolds?: ReadonlyMap<string, readonly { start: number; end: number }[]>;
  model: ModelSizes;
  context: number;
  concurrency: number;
  hostName: string;
  hostDevice: Omit<DeviceSpec, 'name'>;
  /** The host's own NAT toward its rendezvous, as members report theirs (session/nat-report.ts); absent: treated as permissive. */
  hostCapabilities?: Readonly<Record<string, unknown>> | undefined;
  links: SessionLinks;
}

/**
 * `members` in the served ring's order, those outside it after them. The planner keeps the first
 * of equally cheap ring orders, and a ring of three has one edge set either way round: the served
 * order stays, since a swapped one moves every survivor's range and reopens it whole.
 */
function servedOrderFirst(members: readonly MemberView[], serving: ServedOrder | undefined): MemberView[] {
  const at = (m: MemberView): number => {
    const i = serving?.memberIds.indexOf(m.memberId) ?? -1;
    return i < 0 ? members.length : i;
  };
  return [...members].sort((a, b) => at(a) - at(b));
}

/**
 * Plans the ring over `members` with the host first. What each device holds now (a member: its
 * stage in the ring being served and what it reported holding on disk, built or standby; the host:
 * every layer) goes in as `holds` when re-planning, and the range each stage runs as `runs`: a
 * re-plan keeps them where the bottleneck stays within the planner's margin (planner/moves.ts), so
 * less moves and fewer stages reopen. Stages that open anew are split where the re-plan after
 * losing a member would cut them (fault-cuts.ts). Throws PLAN_INSUFFICIENT_MEMORY.
 */
export function planSessionRing(input: RingPlanInput): { plan: PlanJson; order: RingStage[] } {
  const held = new Map<string, RingStage>();
  const serving = input.serving;
  if (serving !== undefined) {
    serving.memberIds.forEach((id, i) => {
      const s = serving.order[i + 1];
      if (s !== undefined && s.end > s.start) held.set(id, s);
    });
  }
  // The host reads every layer from its own copy of the model: a re-plan that gives it more moves nothing.
  const hostHeld = serving !== undefined ? [{ start: 0, end: input.model.layers }] : undefined;
  const hostRuns = serving?.order[0];
  // The host's stage is reshaped as a member's is (session-host.ts), unless it has a memory budget.
  const hostGrows = input.growInPlace !== false && input.hostCapabilities?.memory_budget_bytes === undefined;
  const running = (s: RingStage, grows: boolean): RunningRange => ({ start: s.start, end: s.end, cuts: s.cuts, ...(grows ? { grows } : {}), ...(grows && input.everyCut === true ? { everyCut: true } : {}) });
  // A member's stage is reshaped rather than reopened (ring-member.ts), unless it has a memory budget.
  const memberGrows = (m: MemberView): boolean => input.growInPlace !== false && m.capabilities?.memory_budget_bytes === undefined;
  const limit = (m: MemberView): number | undefined => input.memoryLimits.get(m.memberId);
  const holdsOf = (m: MemberView): { holds?: Array<{ start: number; end: number }>; runs?: RunningRange } => {
    const h = held.get(m.memberId);
    const all = [...(h !== undefined ? [{ start: h.start, end: h.end }] : []), ...(input.standbyHolds?.get(m.memberId) ?? []).map((r) => ({ start: r.start, end: r.end }))];
    return { ...(all.length > 0 ? { holds: all } : {}), ...(h !== undefined ? { runs: running(h, memberGrows(m)) } : {}) };
  };
  const measured = (id: string): { blockMs?: number; stepMs?: number } => {
    const m = input.measuredBlockMs?.get(id);
    return m !== undefined ? { blockMs: m.blockMs, stepMs: m.stepMs } : {};
  };
  // After a loss the survivors' segments may be kept at the price of one more block on the bottleneck
  // stage, where that spares what a fault cut must (fault-cuts.ts: about 1-1.5 s of reopening). Not
  // in the plans fault cuts are chosen against: the cuts serve the plan within the margin, which
  // the real re-plan keeps even where measured times have since moved the fastest one by a block.
  const lost = input.everyCut !== true && serving !== undefined && serving.memberIds.some((id) => !input.members.some((m) => m.memberId === id));
  const reopenSlackBlocks = Math.max(1, Math.ceil((input.cutMinBytes ?? CUT_MIN_BYTES) / (input.model.blockResidentBytes ?? input.model.blockBytes)));
  const { plan, stages } = planRing({
    model: input.model,
    context: input.context,
    concurrency: input.concurrency,
    devices: [
      {
        peer: 0, name: input.hostName, capabilities: input.hostCapabilities, ...(hostHeld !== undefined ? { holds: hostHeld } : {}),
        ...(hostRuns !== undefined && hostRuns.end > hostRuns.start ? { runs: running(hostRuns, hostGrows) } : {}), ...measured(''),
      },
      ...servedOrderFirst(input.members, serving).map((m) => ({ peer: m.peer, name: m.name, capabilities: m.capabilities, addresses: m.addresses, ...(limit(m) !== undefined ? { memoryBytes: limit(m) } : {}), ...holdsOf(m), ...measured(m.memberId) })),
    ],
    fallback: input.hostDevice,
    links: input.links,
    ...(input.measuredHopMs !== undefined ? { hopMs: input.measuredHopMs } : {}),
    ...(input.moveMargin !== undefined ? { moveMargin: input.moveMargin } : {}),
    ...(lost && Number.isFinite(reopenSlackBlocks) ? { reopenSlackBlocks } : {}),
  });
  if (input.everyCut === true) return { plan, order: stages };
  // What each stage runs now, as the host and members will compare it with the plan (stageChange).
  // Only stages that may run in segments (no memory budget) are cut.
  const before = new Map<number, RingStage | undefined>();
  if (hostGrows) before.set(0, hostRuns);
  for (const m of input.members) if (memberGrows(m)) before.set(m.peer, held.get(m.memberId));
  const memberIds = ringMemberIds(stages, input.members);
  const order = withFaultCuts(
    stages,
    (i) => {
      const s = stages[i]!;
      const b = before.get(s.peer);
      return before.has(s.peer) && s.end > s.start && stageChange(b && splitAt(b, b.cuts), s, s.cuts).kind === 'open';
    },
    input.model.blockResidentBytes ?? input.model.blockBytes,
    input.cutMinBytes ?? CUT_MIN_BYTES,
    (peer) => {
      try {
        return planSessionRing({ ...input, members: input.members.filter((m) => m.peer !== peer), serving: { order: stages, memberIds }, everyCut: true }).order;
      } catch {
        return undefined; // the model does not fit without it
      }
    },
  );
  // Each cut is one more session a step runs: one more fixed part of a step.
  return { plan: withSegments(plan, order.map((s) => s.cuts.length + 1)), order };
}

/** The member of each stage after the host's, in ring order. */
export function ringMemberIds(order: readonly RingStage[], members: readonly MemberView[]): string[] {
  const byPeer = new Map(members.map((m) => [m.peer, m]));
  return order.slice(1).map((s) => byPeer.get(s.peer)!.memberId);
}

/** Whether `a` and `b` are neighbours in the ring (their link carries its activations). */
export function isRingPair(order: readonly RingStage[], a: number, b: number): boolean {
  const peers = order.map((s) => s.peer);
  return peers.some((p, i) => {
    const q = peers[(i + 1) % peers.length]!;
    return (p === a && q === b) || (p === b && q === a);
  });
}

export interface AssignmentInput {
  epoch: number;
  /** Stages in ring order, the host's first (it always holds the head). */
  order: readonly RingStage[];
  /** The members planned: every stage after the host's is one of them. */
  members: readonly MemberView[];
  /** The session's links once they are up and measured. */
  links: SessionLinks;
  /** The model's hidden size (elements per token on a link). */
  hidden: number;
  wirePolicy: WirePolicy;
  hostName: string;
  model: Assign['model'];
  maxPositions: number;
  /** The ring's weight layout (absent: exact). */
  layout?: WeightLayout;
}

export interface RingAssignment {
  /** By peer, the host (0) first: the host's stage is loading, the members' assigned. */
  stages: Map<number, StageStatus>;
  /** Each member's peer in this ring. */
  memberPeers: Map<string, number>;
  /** The messages to send, in ring order. */
  assigns: Array<{ memberId: string; stage: RingStage; message: Assign }>;
  /** The host engine's ends: whom it sends to and how, whom it hears from and what that link carries. */
  engine: { firstPeer: number; lastPeer: number; wire: WireOptions; receive: { tensor: ActivationEncoding; zstd: boolean } };
}

/** Each stage's outgoing link gets its own encoding, from that link's kind and measured throughput. */
export function assignRing(input: AssignmentInput): RingAssignment {
  const { order, links } = input;
  const frame = { hidden: input.hidden, decodeBatch: 1, prefillTokens: 128 };
  const wireOut = (i: number): WireOptions => {
    const [a, b] = [order[i]!.peer, order[(i + 1) % order.length]!.peer];
    const l = links.find((x) => (x.a === a && x.b === b) || (x.a === b && x.b === a));
    return chooseLinkWire({ kind: l?.kind, rttMs: l?.rttMs, ...(l?.throughputMBps !== undefined ? { throughputMBps: l.throughputMBps } : {}) }, frame, input.wirePolicy);
  };
  const memberByPeer = new Map(input.members.map((m) => [m.peer, m]));
  const hostRange = order[0]!;
  const stages = new Map<number, StageStatus>();
  const memberPeers = new Map<string, number>();
  stages.set(0, { peer: 0, name: input.hostName, start: hostRange.start, end: hostRange.end, head: true, state: 'loading', wire: wireOut(0) });
  for (const [i, s] of order.entries()) {
    if (i === 0) continue;
    const m = memberByPeer.get(s.peer)!;
    memberPeers.set(m.memberId, s.peer);
    stages.set(s.peer, { peer: s.peer, name: m.name, start: s.start, end: s.end, head: false, state: 'assigned', wire: wireOut(i) });
  }
  const wireOf = (peer: number): WireOptions => stages.get(peer)!.wire!;
  const assigns = order.slice(1).map((s, k) => {
    const i = k + 1;
    const prev = order[i - 1]!.peer;
    const message: Assign = {
      kind: 'assign', epoch: input.epoch, start: s.start, end: s.end,
      prev, next: order[(i + 1) % order.length]!.peer,
      ...wireOf(s.peer),
      // The first member embeds when the host runs no blocks: it receives token ids.
      receive: i === 1 && hostRange.end === 0 ? { tensor: 'ids', zstd: wireOf(0).zstd } : { tensor: wireOf(prev).encoding, zstd: wireOf(prev).zstd },
      model: input.model,
      maxPositions: input.maxPositions,
      ...(input.layout === 'fast' ? { layout: input.layout } : {}),
      ...(s.cuts.length > 0 ? { cuts: [...s.cuts] } : {}),
    };
    return { memberId: memberByPeer.get(s.peer)!.memberId, stage: s, message };
  });
  const last = order[order.length - 1]!.peer;
  return {
    stages,
    memberPeers,
    assigns,
    engine: { firstPeer: order[1]!.peer, lastPeer: last, wire: wireOf(0), receive: { tensor: wireOf(last).encoding, zstd: wireOf(last).zstd } },
  };
}

/**
 * The host's own blocks [0, end) for the new ring, split at `cuts`: none (the first member embeds),
 * the stage it runs already (`running`, its segments' ranges) when its range did not change, that
 * stage reshaped, or a new one to open (runtime/stage-segments.ts stageChange).
 */
export function hostBlocks(end: number, running: readonly LayerRange[] | undefined, cuts: readonly number[]): { kind: 'none' } | ReturnType<typeof stageChange> {
  if (end === 0) return { kind: 'none' };
  return stageChange(running, { start: 0, end }, cuts);
}

/** The host stage's status once its blocks are in place (in `segments` sessions, `openedLayers` of them anew, after `loadMs`). */
export function hostStageReady(stage: StageStatus, kept: boolean, loaded: { loadMs: number; segments: number; openedLayers: number }): StageStatus {
  return { ...stage, state: kept ? 'kept' : 'ready', source: kept ? 'kept' : 'local', ...loaded };
}

type StageReport = Extract<MemberToHostBody, { kind: 'assigned' | 'opening' | 'ready' | 'failed' }>;

/** A member's stage after its report: loading once it took the assignment, opening once its weights are in, ready or kept once loaded, or failed. */
export function stageReported(stage: StageStatus, report: StageReport): StageStatus {
  switch (report.kind) {
    case 'assigned':
      return { ...stage, state: 'loading' };
    case 'opening':
      return { ...stage, state: 'opening', source: report.source, transferredBytes: report.transferredBytes };
    case 'ready':
      return { ...stage, state: report.source === 'kept' ? 'kept' : 'ready', source: report.source, transferredBytes: report.transferredBytes, loadMs: report.loadMs };
    case 'failed':
      return { ...stage, state: 'failed' };
  }
}

/**
 * The first stage of the ring being built that failed; whether every stage is ready (or kept);
 * whether every stage takes steps now: ready, kept or opening (its steps wait for it).
 */
export function ringLoad(stages: ReadonlyMap<number, StageStatus>): { failed: StageStatus | undefined; ready: boolean; accepting: boolean } {
  const all = [...stages.values()];
  const ready = (s: StageStatus): boolean => s.state === 'ready' || s.state === 'kept';
  return { failed: all.find((s) => s.state === 'failed'), ready: all.every(ready), accepting: all.every((s) => ready(s) || s.state === 'opening') };
}

/** Weight bytes members received (from the host or the model's URL) to load their ranges. */
export function bytesMoved(stages: ReadonlyMap<number, StageStatus>): number {
  return [...stages.values()].reduce((n, s) => n + (s.source === 'host' || s.source === 'host-http' || s.source === 'url' ? (s.transferredBytes ?? 0) : 0), 0);
}

/**
 * Whether the ring takes a member's peer-fault report: about the ring served (its epoch), naming
 * the reporter's previous stage (or itself, for NaN it produced), never the host.
 */
export function peerFaultAccepted(ring: { epoch: number; order: readonly RingStage[] } | undefined, reporter: number | undefined, report: { epoch: number; peer: number; fault: 'malformed' | 'numeric' }): boolean {
  const order = ring?.order.map((s) => s.peer) ?? [];
  const at = reporter === undefined ? -1 : order.indexOf(reporter);
  const prev = at > 0 ? order[at - 1] : undefined;
  return report.epoch === ring?.epoch && (report.peer === prev || (report.fault === 'numeric' && report.peer === reporter)) && report.peer !== 0;
}
