// The control API over the ring: maps SessionHost.status() into the wire's plan (who holds which
// layers, predicted or measured stage ms, tokens/s, or why there is no plan), hosts from the UI
// through createSessionHost (the composition `kiwi host --model` runs), and gives the UI's joins a
// RingMember whose assignment and load progress feed SessionControl's `assignment` hook.
import { stat } from 'node:fs/promises';
import { totalmem } from 'node:os';
import type { HostRequest, PlanWire, SessionStatus, StageWire } from '../../../common/control-api.js';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { summarizeModel } from '../model/model-summary.js';
import { RingMember, type RingMemberOptions } from '../pipeline/ring-member.js';
import { createSessionHost, type SessionHost, type SessionHostOptions, type SessionHostStatus } from '../pipeline/session-host.js';
import { modelSizesFromSummary } from '../planner/model-sizes.js';
import type { HostOptions } from '../session/host.js';
import type { MemberSession } from '../session/member.js';
import type { HostedSession, MemberRing, StartHosting } from './control-api-source.js';
import { startOpenAiServer, type OpenAiServer, type OpenAiServerOptions } from './http-server.js';

type WireError = { code: string; message: string };

/** How often measured stage times are re-announced to the UI while they change. */
const TIMING_REFRESH_MS = 1000;

/**
 * The ring's plan as the UI shows it. Once the host assigned the stages they name the peers; the
 * time of each stage is measured (mean of recent ring steps) when there are steps, else the
 * planner's prediction. tokens/s is one request's: 1000 / ring time (measured or predicted).
 */
export function ringPlanWire(s: SessionHostStatus): { plan: PlanWire | null; error: WireError | null } {
  const error = s.error ?? null;
  const plan = s.plan;
  if (plan === undefined) return { plan: null, error };
  const predicted = new Map(plan.stages.map((p) => [`${p.device}|${p.start}-${p.end}`, p.stage_ms]));
  const peerByName = new Map<string, number>(s.session.members.map((m) => [m.name, m.peer]));
  const measured = (start: number, end: number, head: boolean): number | undefined =>
    head ? (s.timing.meanHostMs ?? undefined) : s.timing.meanStageMs[`${start}-${end}`];
  const stages: StageWire[] = s.stages.length > 0
    ? s.stages.map((st) => ({
      peer: st.peer, name: st.name, start: st.start, end: st.end, head: st.head,
      stage_ms: measured(st.start, st.end, st.head) ?? predicted.get(`${st.name}|${st.start}-${st.end}`) ?? null,
    }))
    // Planned but not yet assigned: the host is the head device, members are found by name.
    : plan.stages.map((p) => ({
      peer: p.device === plan.head ? 0 : (peerByName.get(p.device) ?? -1), name: p.device, start: p.start, end: p.end, head: p.head, stage_ms: p.stage_ms,
    }));
  const ringMs = s.timing.meanRingMs ?? plan.circuit_ms;
  return {
    plan: {
      stages,
      layers: Math.max(0, ...plan.stages.map((p) => p.end)),
      tokens_per_s: ringMs !== null && ringMs > 0 ? 1000 / ringMs : null,
      measured: s.timing.meanRingMs !== null,
    },
    error,
  };
}

/** A running SessionHost (and the API serving through it) as the control API's hosted session. */
export function hostedRing(ring: SessionHost, opts: { model: string; server: OpenAiServer | null; close?: () => Promise<void> }): HostedSession {
  return {
    session: ring.session,
    model: opts.model,
    // /v1 answers 503 until the ring serves; the UI shows it once it does.
    get serving() {
      return opts.server !== null && ring.status().phase === 'serving' ? { url: opts.server.url, model: ring.backend.modelId } : null;
    },
    plan: () => ringPlanWire(ring.status()),
    watch(listener) {
      for (const event of ['plan', 'assigned', 'weights-progress', 'ready', 'serving', 'error'] as const) ring.on(event, () => listener());
      // Stage times change with every ring step, which has no event: re-announce once a second when they did.
      let steps = 0;
      const tick = setInterval(() => {
        const t = ring.status();
        if (t.phase === 'closed') return clearInterval(tick);
        if (t.timing.steps === steps) return;
        steps = t.timing.steps;
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

/**
 * The SessionHost options read from the model file, as `kiwi host --model` and hosting from the UI
 * both build them: its path and layer sizes, and the host's device.
 */
export async function ringModelOptions(modelPath: string): Promise<Pick<SessionHostOptions, 'modelPath' | 'modelSizes' | 'hostDevice'>> {
  const file = await openGguf(modelPath);
  return {
    modelPath,
    modelSizes: modelSizesFromSummary(summarizeModel(file)),
    // Without a benchmark of its own, the host stands in its RAM (memory tier) for every device that reports none.
    hostDevice: { memoryBytes: totalmem() },
  };
}

export interface RingHostingOptions {
  session?: HostOptions;
  /** Where /v1 listens: default 127.0.0.1:8080. */
  api?: Pick<OpenAiServerOptions, 'host' | 'port' | 'maxActive' | 'maxQueue' | 'apiKey'>;
  /** Everything else the ring takes (expect, settle time, wire, cache, threads...). */
  ring?: Omit<SessionHostOptions, 'modelPath' | 'modelSizes' | 'session' | 'hostDevice'> & { hostDevice?: SessionHostOptions['hostDevice'] };
  /** Reports a ring that could not form (also shown as the plan's error). */
  onError?: (err: KiwiError) => void;
}

/** Hosting from the UI: a session whose members become the ring, served on /v1 once it forms. */
export function ringHosting(opts: RingHostingOptions = {}): StartHosting {
  return async (req: HostRequest): Promise<HostedSession> => {
    // Checked first so that a typo fails before a code is shown to friends.
    const isFile = await stat(req.model).then((st) => st.isFile(), () => false);
    if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${req.model} does not exist. Pick the path of a GGUF file.`);
    const { hostDevice, ...model } = await ringModelOptions(req.model);
    const ring = await createSessionHost({
      hostDevice,
      ...opts.ring,
      ...model,
      session: { ...opts.session, ...(req.auto_approve !== undefined ? { autoApprove: req.auto_approve } : {}) },
    });
    let server: OpenAiServer;
    try {
      server = await startOpenAiServer(ring.backend, { host: '127.0.0.1', port: 8080, ...opts.api });
    } catch (err) {
      await ring.close();
      throw err;
    }
    const abort = new AbortController();
    // The ring reports a failure both here and in status(); without a listener an 'error' event would throw.
    ring.on('error', (err) => {
      if (!abort.signal.aborted) opts.onError?.(err);
    });
    ring.form(abort.signal).catch((err: unknown) => {
      // form() records a KiwiError in status() (the UI shows it as the plan's error); anything else is a bug.
      if (!isKiwiError(err)) throw err;
    });
    return hostedRing(ring, {
      model: req.model,
      server,
      async close() {
        abort.abort(new KiwiError('SESSION_ENDED', 'The host left the session.'));
        await server.close();
        await ring.close();
      },
    });
  };
}

export function memberRing(opts: RingMemberOptions & { onError?: (err: KiwiError) => void }): (session: MemberSession, onChange: () => void) => MemberRing {
  return (session, onChange) => {
    const ring = new RingMember(session, opts);
    // Errors are reported to the host by the RingMember itself; the UI's caller may also log them.
    ring.on('error', (err) => opts.onError?.(err));
    ring.on('assigned', onChange);
    ring.on('weights-progress', onChange);
    ring.on('ready', onChange);
    let stageMs: number | null = null;
    const tick = setInterval(() => {
      const now = ring.status().stageMs;
      if (now === stageMs) return;
      stageMs = now;
      onChange();
    }, TIMING_REFRESH_MS);
    tick.unref();
    return {
      assignment: () => ringAssignment(ring.status()),
      close: () => {
        clearInterval(tick);
        return ring.close();
      },
    };
  };
}

export function ringAssignment(s: ReturnType<RingMember['status']>): SessionStatus['assignment'] {
  if (s.start === undefined || s.end === undefined) return null;
  return { start: s.start, end: s.end, head: false, load_fraction: s.loadFraction, stage_ms: s.stageMs };
}

