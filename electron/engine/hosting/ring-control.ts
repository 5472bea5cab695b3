// The control API over the ring: maps SessionHost.status() into the wire's plan (who holds which
// layers, predicted and measured stage ms side by side, tokens/s, or why there is no plan), its ring state
// (phase, generation, recoveries) and whether tokens flow (hostedRing: a running ring as
// SessionControl's HostedSession), and a RingMember's status into the member's assignment. The
// nodes themselves are composed in host-node.ts and member-node.ts.
import type { FlowWire, PlanWire, RingStateWire, SessionStatus, StageWire } from '../../../common/control-api.js';
import { edgeReportWire } from '../pipeline/edge-report.js';
import type { RingMember } from '../pipeline/ring-member.js';
import type { SessionHost, SessionHostStatus } from '../pipeline/session-host.js';
import type { OpenAiServer } from '../server/http-server.js';
import type { HostedSession, WireError } from './control-hooks.js';

/** How often measured stage times (and whether tokens flow) are re-sampled and re-announced while they change. */
export const TIMING_REFRESH_MS = 1000;
/** Tokens count as flowing for this long after the last step seen. */
export const FLOW_HOLD_MS = 2 * TIMING_REFRESH_MS;

/**
 * The ring's plan as the UI shows it. Once the host assigned the stages they name the peers; the
 * time of each stage is measured (mean of recent ring steps) when there are steps, else the
 * planner's prediction; predicted_ms and measured_ms give both, measured as the drift monitor sees
 * it (median of recent single-request decode steps, the unit the plan predicts) where it has
 * steps, else the mean. tokens/s is one request's: 1000 / ring time (measured or predicted).
 */
export function ringPlanWire(s: SessionHostStatus): { plan: PlanWire | null; error: WireError | null } {
  const error = s.error ?? null;
  const plan = s.plan;
  if (plan === undefined) return { plan: null, error };
  const predicted = new Map(plan.stages.map((p) => [`${p.device}|${p.start}-${p.end}`, p.stage_ms]));
  const peerByName = new Map<string, number>(s.session.members.map((m) => [m.name, m.peer]));
  const measured = (start: number, end: number, head: boolean): number | undefined =>
    head ? (s.timing.meanHostMs ?? undefined) : s.timing.meanStageMs[`${start}-${end}`];
  const decodeMs = new Map(s.drift.stages.map((d) => [`${d.name}|${d.start}-${d.end}`, d.measuredMs]));
  const stages: StageWire[] = s.stages.length > 0
    ? s.stages.map((st) => {
      const key = `${st.name}|${st.start}-${st.end}`;
      const m = measured(st.start, st.end, st.head) ?? null;
      const p = predicted.get(key) ?? null;
      // The drift monitor judges the host's blocks alone; the host's row shows its head too, as predicted_ms does.
      return { peer: st.peer, name: st.name, start: st.start, end: st.end, head: st.head, stage_ms: m ?? p, predicted_ms: p, measured_ms: (st.head ? undefined : decodeMs.get(key)) ?? m, state: st.state };
    })
    // Planned but not yet assigned: the host is the head device, members are found by name.
    : plan.stages.map((p) => ({
      peer: p.device === plan.head ? 0 : (peerByName.get(p.device) ?? -1), name: p.device, start: p.start, end: p.end, head: p.head, stage_ms: p.stage_ms,
      predicted_ms: p.stage_ms, measured_ms: null, state: null,
    }));
  const ringMs = s.timing.meanRingMs ?? plan.circuit_ms;
  return {
    plan: {
      stages,
      layers: Math.max(0, ...plan.stages.map((p) => p.end)),
      tokens_per_s: ringMs !== null && ringMs > 0 ? 1000 / ringMs : null,
      measured: s.timing.meanRingMs !== null,
      // Each edge's predicted and actual kind, each member's NAT (pipeline/edge-report.ts).
      ...edgeReportWire(s),
    },
    error,
  };
}

/** The ring's phase, generation, the re-plan in progress and the past ones, as the UI shows them. */
export function ringStateWire(s: SessionHostStatus): RingStateWire {
  return {
    phase: s.phase,
    epoch: s.epoch,
    recovery: s.recovery === undefined ? null : { reason: s.recovery.reason, started_at: s.recovery.startedAt },
    waiting_until: s.waitingUntil ?? null,
    recoveries: s.recoveries.slice(-16).map((r) => ({
      epoch: r.epoch, reason: r.reason, started_at: r.startedAt, duration_ms: r.durationMs, bytes_moved: r.bytesMoved, resumed_requests: r.resumedRequests,
    })),
  };
}

/**
 * Whether tokens flow, from measured steps, sampled (steps have no event): `mark` is what moves
 * with every step (the recent step timings: their count grows, their means move), `busy` says
 * steps are in flight. The flow stops FLOW_HOLD_MS after the last of either.
 */
export class FlowMeter {
  private last = '';
  private lastChange = -Infinity;
  /** The state the previous sample announced: a late tick (a busy machine delays the interval) must still announce the stop. */
  private announced = false;

  /** Records a sample; true when the flow state changed since the previous one, or the mark moved. */
  sample(mark: string, busy: boolean, now = Date.now()): boolean {
    if (mark !== this.last || busy) {
      this.last = mark;
      this.lastChange = now;
    }
    const active = this.activeAt(now);
    const changed = active !== this.announced || this.lastChange === now;
    this.announced = active;
    return changed;
  }

  activeAt(now = Date.now()): boolean {
    return now - this.lastChange < FLOW_HOLD_MS;
  }
}

/** The host's flow sample: its ring's step timings and finished requests, and the steps in flight. */
export function sampleHostFlow(meter: FlowMeter, s: Pick<SessionHostStatus, 'timing' | 'requests'>, now = Date.now()): boolean {
  const t = s.timing;
  return meter.sample(`${t.steps}|${t.meanRingMs}|${t.meanHostMs}|${s.requests.completed + s.requests.cancelled + s.requests.failed}`, t.inFlight > 0, now);
}

/** A running SessionHost (and the API serving through it) as the control API's hosted session. */
export function hostedRing(ring: SessionHost, opts: { model: string; server: OpenAiServer | null; close?: () => Promise<void> }): HostedSession {
  const meter = new FlowMeter();
  // The first sample is the ring as it is now: only later steps count as flowing.
  sampleHostFlow(meter, ring.status(), -Infinity);
  return {
    session: ring.session,
    model: opts.model,
    // /v1 answers 503 until the ring serves; the UI shows it once it does.
    get serving() {
      return opts.server !== null && ring.status().phase === 'serving' ? { url: opts.server.url, model: ring.backend.modelId } : null;
    },
    plan: () => ringPlanWire(ring.status()),
    ringState: () => ringStateWire(ring.status()),
    flow: (): FlowWire => {
      const s = ring.status();
      return { active: s.phase === 'serving' && meter.activeAt(), tokens_per_s: s.timing.meanRingMs !== null && s.timing.meanRingMs > 0 ? 1000 / s.timing.meanRingMs : null };
    },
    watch(listener) {
      for (const event of ['plan', 'assigned', 'weights-progress', 'ready', 'serving', 'recovering', 'waiting', 'recovered', 'error'] as const) ring.on(event, () => listener());
      // Stage times change with every ring step, which has no event: re-announce once a second when
      // they did, and when tokens start or stop flowing. Recovery and waiting show up the same way.
      let phase = ring.status().phase;
      const tick = setInterval(() => {
        const t = ring.status();
        if (t.phase === 'closed') return clearInterval(tick);
        const flowChanged = sampleHostFlow(meter, t);
        if (!flowChanged && t.phase === phase && t.recovery === undefined && t.waitingUntil === undefined) return;
        phase = t.phase;
        listener();
      }, TIMING_REFRESH_MS);
      tick.unref();
    },
    close: opts.close ?? (async () => {
      await opts.server?.close();
      await ring.close();
    }),
  };
}

export function ringAssignment(s: ReturnType<RingMember['status']>): SessionStatus['assignment'] {
  if (s.start === undefined || s.end === undefined) return null;
  return { start: s.start, end: s.end, head: false, load_fraction: s.loadFraction, stage_ms: s.stageMs };
}

