// Lossless speculative decoding (issue 16), the generation loop's SpeculationHook: a drafter
// (prompt lookup by default, prompt-lookup.ts) guesses k tokens after a decoding request's last
// one; the step carries them as one row of k+1 tokens, so every stage of a ring verifies all of
// them in one trip; the head returns the logits of all k+1 positions and verify() samples them in
// order exactly as k+1 plain steps would (penalties see the accepted tokens, the grammar masks each
// position in its state, stop sequences and end-of-generation end it where they would): a draft
// is kept while the sampled token equals it (greedy) or is accepted by speculative sampling
// (Sampler.sampleWithDraft keeps the target distribution); the first position that rejects gives
// the token that replaces it. The positions after it are dropped from every stage's caches before
// the request's next step (rollbackCache; the ring's members drop what lies past a row's `pos`).
// By default the row is verified exactly (SpeculativeVerify): it runs as a replay, each position
// as its decode step, so the logits are bit for bit those of plain decoding.
//
// k adapts per request: from its measured acceptance rate (geometric model: E[tokens per step] =
// (1 - a^(k+1)) / (1 - a)) and the measured cost of a verify step against a plain one, the k with
// the best tokens per unit of time; when no k beats a plain step by 5%, none is drafted (a rare
// one-token probe every 16 steps keeps measuring, a few % at worst), so a stream never runs much
// below the speed it has without speculation.
//
// Not speculated: scoring (forced ids, nothing to guess) and steps of several rows (a batch already
// shares the ring's trip; a stage runs a batch one token per row). `--draft-model` drafts with a
// small model of the same vocabulary instead (draft-model.ts).
import { KiwiError } from '../errors.js';
import { sampleNext, type FinishReason, type LoopRequest, type SpeculationHook } from './generation-loop.js';
import { PromptLookupDrafter, type Drafter } from './prompt-lookup.js';

/**
 * How a verify step computes its positions: `exact` (the default) as the decode steps that would
 * have made them, bit for bit (each stage runs the row as a replay: one pass where that is exact,
 * else one decode step per position, still in one trip round the ring); `chunk` as one prefill
 * chunk (faster on one machine, but its attention sums in another order: a near-tie can flip).
 */
export type SpeculativeVerify = 'exact' | 'chunk';

/** off, auto (adaptive k, at most MAX_DRAFT), or a fixed k. */
export type SpeculativeMode = { kind: 'off' } | { kind: 'auto'; verify?: SpeculativeVerify } | { kind: 'fixed'; k: number; verify?: SpeculativeVerify };

export const MAX_DRAFT = 8;

/** Parses `--speculative off|auto|K` (K in 1..MAX_DRAFT). */
export function parseSpeculative(text: string): SpeculativeMode {
  const t = text.trim().toLowerCase();
  if (t === 'off' || t === '0') return { kind: 'off' };
  if (t === 'auto') return { kind: 'auto' };
  const k = Number(t);
  if (Number.isInteger(k) && k >= 1 && k <= MAX_DRAFT) return { kind: 'fixed', k };
  throw new KiwiError('USAGE', `--speculative takes off, auto or a draft length 1..${MAX_DRAFT}, not '${text}'`);
}

/** Parses `--speculative-verify exact|chunk` into a mode (off stays off). */
export function withVerify(mode: SpeculativeMode, text: string | undefined): SpeculativeMode {
  if (text === undefined) return mode;
  const t = text.trim().toLowerCase();
  if (t !== 'exact' && t !== 'chunk') throw new KiwiError('USAGE', `--speculative-verify takes exact or chunk, not '${text}'`);
  return mode.kind === 'off' ? mode : { ...mode, verify: t };
}

/** What /health shows of speculation. */
export interface SpeculativeStats {
  mode: 'off' | 'auto' | number;
  /** Steps that verified drafts, tokens drafted and accepted, and their ratio (null before any). */
  verifySteps: number;
  drafted: number;
  accepted: number;
  acceptance: number | null;
  /** Tokens generated per verify step (accepted + the one every step gives). */
  tokensPerVerifyStep: number | null;
  /** Cost of one draft token relative to a plain one-row step, as measured (null before measured). */
  draftCost: number | null;
}

interface RequestStats {
  accepted: number;
  /** Draft positions tried: accepted ones plus the one that rejected (when one did). */
  trials: number;
  /** Decode steps since the last draft (the probe clock while no k pays). */
  plainSteps: number;
}

/** Below this expected speed-up a draft does not pay. */
const MIN_GAIN = 1.05;
/** While no k pays, one probe draft of one token every this many decode steps. */
const PROBE_EVERY = 16;
/** Weight (in trials) of the loop-wide acceptance in a request's estimate. */
const PRIOR_TRIALS = 4;
const EMA = 0.2;

export class SpeculativeDecoding implements SpeculationHook {
  private readonly perRequest = new WeakMap<LoopRequest<unknown>, RequestStats>();
  private readonly totals = { verifySteps: 0, drafted: 0, accepted: 0, trials: 0 };
  /** EMA of a plain one-row step's wall time, ms. */
  private plainMs: number | undefined;
  /** EMA of what each draft token adds to a step, relative to plainMs. */
  private draftCost: number | undefined;

  constructor(
    readonly mode: Exclude<SpeculativeMode, { kind: 'off' }>,
    private readonly drafter: Drafter = new PromptLookupDrafter(),
  ) {}

  get exactVerify(): boolean {
    return this.mode.verify !== 'chunk';
  }

  /** Whether a request may be speculated at all (see the header). */
  static eligible(a: LoopRequest<unknown>): boolean {
    return a.p.sampler.options.forcedIds === undefined;
  }

  draft(a: LoopRequest<unknown>): readonly number[] | Promise<readonly number[]> {
    if (!SpeculativeDecoding.eligible(a)) return [];
    const s = this.statsOf(a);
    // At most what the request may still generate, less the token the step gives anyway.
    const room = a.maxTokens - a.ids.length - 1;
    const k = Math.min(room, this.chooseK(s));
    if (k <= 0) {
      s.plainSteps++;
      return [];
    }
    const drafts = this.drafter.draft(a.history, k, a);
    // A drafter that fails (a draft model's run) costs the step its drafts, not the request.
    return Array.isArray(drafts) ? counted(s, drafts) : drafts.then((d) => counted(s, d), () => counted(s, []));
  }

  finished(a: LoopRequest<unknown>): void {
    this.drafter.release?.(a);
  }

  verify(a: LoopRequest<unknown>, logits: Float32Array, drafts: readonly number[], stepMs: number): FinishReason | undefined {
    const vocab = logits.length / (drafts.length + 1);
    if (!Number.isInteger(vocab)) throw new Error(`verify: ${logits.length} logits for ${drafts.length + 1} positions`);
    let accepted = 0;
    let outcome: FinishReason | undefined;
    for (let i = 0; i <= drafts.length; i++) {
      const draft = drafts[i];
      outcome = sampleNext(a, logits.subarray(i * vocab, (i + 1) * vocab), draft);
      // Ended (or aborted from its own onToken), or the sampled token is not the draft: the rest is dropped.
      if (outcome !== undefined || a.done || draft === undefined || a.history.at(-1) !== draft) break;
      accepted++;
    }
    // The caches hold pos + drafts + 1 positions; the accepted ones stay (the loop advanced pos by all).
    a.pos -= drafts.length - accepted;
    this.observe(a, drafts.length, accepted, stepMs);
    return outcome;
  }

  get drafterName(): string {
    return this.drafter.name;
  }

  plainStep(rows: number, ms: number): void {
    if (rows !== 1) return;
    this.plainMs = this.plainMs === undefined ? ms : this.plainMs + EMA * (ms - this.plainMs);
  }

  stats(): SpeculativeStats {
    const t = this.totals;
    return {
      mode: this.mode.kind === 'fixed' ? this.mode.k : 'auto',
      verifySteps: t.verifySteps,
      drafted: t.drafted,
      accepted: t.accepted,
      acceptance: t.drafted > 0 ? t.accepted / t.drafted : null,
      tokensPerVerifyStep: t.verifySteps > 0 ? (t.accepted + t.verifySteps) / t.verifySteps : null,
      draftCost: this.draftCost ?? null,
    };
  }

  /** The draft length for a request now (0: a plain step). */
  chooseK(s: RequestStats): number {
    if (this.mode.kind === 'fixed') return this.mode.k;
    // The loop's rate starts at 0.5 (a prior of PRIOR_TRIALS), so one early rejection does not end drafting.
    const globalRate = (this.totals.accepted + PRIOR_TRIALS / 2) / (this.totals.trials + PRIOR_TRIALS);
    const alpha = (s.accepted + PRIOR_TRIALS * globalRate) / (s.trials + PRIOR_TRIALS);
    const k = bestDraftLength(alpha, this.draftCost ?? 0.25, MAX_DRAFT);
    if (k > 0) return k;
    // Probes are rarer where a draft token is dear (a compute-bound step): their cost stays ~1.5%.
    const every = Math.round(PROBE_EVERY * (1 + 3 * Math.min(1, this.draftCost ?? 0)));
    return s.plainSteps >= every ? 1 : 0;
  }

  private observe(a: LoopRequest<unknown>, drafted: number, accepted: number, stepMs: number): void {
    const s = this.statsOf(a);
    const trials = accepted < drafted ? accepted + 1 : accepted;
    s.accepted += accepted;
    s.trials += trials;
    const t = this.totals;
    t.verifySteps++;
    t.drafted += drafted;
    t.accepted += accepted;
    t.trials += trials;
    if (this.plainMs !== undefined && this.plainMs > 0) {
      const cost = Math.max(0, stepMs / this.plainMs - 1) / drafted;
      this.draftCost = this.draftCost === undefined ? cost : this.draftCost + EMA * (cost - this.draftCost);
    }
  }

  private statsOf(a: LoopRequest<unknown>): RequestStats {
    let s = this.perRequest.get(a);
    if (s === undefined) {
      s = { accepted: 0, trials: 0, plainSteps: 0 };
      this.perRequest.set(a, s);
    }
    return s;
  }
}

/** Counts a request's plain steps since its last draft (the probe clock). */
function counted(s: RequestStats, drafts: number[]): number[] {
  if (drafts.length > 0) s.plainSteps = 0;
  else s.plainSteps++;
  return drafts;
}

/**
 * The k in 1..maxK with the most tokens per unit of time, for a per-token acceptance `alpha` and a
 * verify step of k drafts that costs 1 + k * draftCost plain steps; 0 when none gains MIN_GAIN.
 */
export function bestDraftLength(alpha: number, draftCost: number, maxK: number): number {
  const a = Math.min(Math.max(alpha, 0), 0.999);
  let best = 0;
  let bestGain = MIN_GAIN;
  for (let k = 1; k <= maxK; k++) {
    const tokens = (1 - a ** (k + 1)) / (1 - a);
    const gain = tokens / (1 + k * draftCost);
    if (gain > bestGain) {
      best = k;
      bestGain = gain;
    }
  }
  return best;
}

/** The loop's hook for a mode (undefined: off). */
export function speculationFor(mode: SpeculativeMode | undefined, drafter?: Drafter): SpeculativeDecoding | undefined {
  if (mode === undefined || mode.kind === 'off') return undefined;
  return new SpeculativeDecoding(mode, drafter);
}

/** Speculation as GET /health shows it (`speculative`); absent when it is off. */
export function speculativeHealth(s: SpeculativeDecoding | undefined): Record<string, unknown> {
  if (s === undefined) return {};
  const t = s.stats();
  return {
    speculative: {
      mode: t.mode, verify: s.exactVerify ? 'exact' : 'chunk', drafter: s.drafterName, verify_steps: t.verifySteps, drafted: t.drafted, accepted: t.accepted,
      acceptance: t.acceptance, tokens_per_verify_step: t.tokensPerVerifyStep, draft_cost: t.draftCost,
    },
  };
}
