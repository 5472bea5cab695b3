// SessionHost's public shapes (session-host.ts re-exports them): its options, the status a UI
// reads, the events it emits, and the ring timing summary in that status (pure).
import type { KiwiError } from '../errors.js';
import type { ExecutionProvider } from '../ort/session.js';
import type { DeviceSpec, ModelSizes } from '../planner/fleet.js';
import type { PlanJson } from '../planner/plan-json.js';
import type { PrefixCacheStats } from '../runtime/prefix-cache.js';
import type { DraftModelDrafter } from '../runtime/draft-model.js';
import type { SpeculativeMode, SpeculativeStats } from '../runtime/speculative.js';
import type { ShardCache } from '../runtime/shard-cache.js';
import type { WeightLayout } from '../runtime/weights/convert.js';
import type { HostOptions, SessionStatus } from '../session/host.js';
import type { WirePolicy } from './link-wire.js';
import type { StageStatus } from './ring-assignment.js';
import type { StepTiming } from './ring-engine.js';
import type { HostStandbyStatus } from './host-standby-builds.js';
import type { WeightsTokens } from './weights-http.js';
import type { Phase, RecoveryRecord } from './ring-phase.js';
import type { DriftOptions } from './stage-drift.js';
import type { DriftReplan, DriftStatus } from './stage-drift-monitor.js';

export interface SessionHostOptions {
  modelPath: string;
  /** Where the model file came from: members without a copy fetch their tensors' byte ranges from it. */
  modelUrl?: string;
  /** The host's HTTP range server for its model file (weights-http.ts), named to members in their weights-plan with each one's own token. */
  weightsHttp?: { urls: string[]; tokens: WeightsTokens };
  /** The model as the planner sizes it (commands/plan.ts: modelSizesFromSummary). */
  modelSizes: ModelSizes;
  session: HostOptions;
  /** Plan once this many members are active. */
  expect?: number;
  settleMs?: number;
  /** This machine as a fleet device; also stands in for members that report no device. */
  hostDevice: Omit<DeviceSpec, 'name'>;
  hostName?: string;
  /** How each ring link's activations are encoded, chosen per link from what is measured of it (link-wire.ts); default exact (f32). */
  wirePolicy?: WirePolicy;
  /** Context per request (positions); default the model's, at most 4096. */
  maxPositions?: number;
  concurrency?: number;
  maxBatch?: number;
  maxInFlight?: number;
  kvBudgetBytes?: number;
  /** The prompt cache's bound (KV bytes of recent prompts, kept on every stage); 0 or absent: off. */
  promptCacheBytes?: number;
  /** Speculative decoding through the ring (runtime/speculative.ts); default off. */
  speculative?: SpeculativeMode;
  /** After a re-plan, stages that kept a request's caches skip the layers they hold (runtime/stage-keep.ts); default yes, false for comparison. */
  keepCaches?: boolean;
  /** A re-plan serves the new ring once every member's weights are in, while their sessions still open (steps wait at the member); default yes, false waits for every stage to be ready (for comparison). */
  pipelinedRecovery?: boolean;
  /** Stages are split where losing a member would cut them only where that spares this many bytes (pipeline/fault-cuts.ts); default CUT_MIN_BYTES. */
  cutMinBytes?: number;
  /** A small model of the same vocabulary that drafts on the host (runtime/draft-model.ts); the ring owns it (closes it). */
  drafter?: DraftModelDrafter;
  provider?: ExecutionProvider;
  threads?: number;
  /** How every stage of the ring lays out its weights (runtime/weights/convert.ts); default exact. */
  weightLayout?: WeightLayout;
  cache?: ShardCache;
  /** Disk for the host's standby layers: the layers after its blocks, built into the shard cache once the ring serves (host-standby-builds.ts); absent: none. */
  standbyBytes?: number;
  /** How long members may take to load (and receive) their weights. Default 10 min. */
  readyTimeoutMs?: number;
  /** How long requests wait for a ring when the members left cannot hold the model. Default 120 s. */
  recoveryTimeoutMs?: number;
  /** After a member joins or returns, wait this long for others before re-planning it in. Default 1 s. */
  rejoinDelayMs?: number;
  /** Re-plan when a stage's measured time drifts off its prediction (stage-drift.ts); false: never. Default DEFAULT_DRIFT_OPTIONS. */
  drift?: DriftOptions | false;
}

/** Recent ring steps: wall time host to host, and the host's own part (ms). */
export interface RingTiming {
  steps: number;
  meanRingMs: number | null;
  meanHostMs: number | null;
  meanStageMs: Record<string, number>;
  inFlight: number;
}

export interface SessionHostStatus {
  phase: Phase;
  /** The ring's generation: 1 for the first plan, one more per re-plan (0 before the first). */
  epoch: number;
  /** The re-plan under way. */
  recovery: { reason: string; startedAt: number } | undefined;
  /** Completed re-plans, newest last (at most 16). */
  recoveries: RecoveryRecord[];
  /** While waiting for members: when held requests fail (epoch ms), or undefined once they have. */
  waitingUntil: number | undefined;
  session: SessionStatus;
  plan: PlanJson | undefined;
  stages: StageStatus[];
  /** Recent ring steps: wall time host to host, and the host's own part (ms). */
  timing: RingTiming;
  /** KV blocks of the host's admission pool (each request reserves its whole length around the ring). */
  /** cachedBlocks: held by the prompt cache, given back to requests that need them. */
  kv: { freeBlocks: number; totalBlocks: number; cachedBlocks: number } | undefined;
  /** Prompt cache hits and tokens reused (runtime/prefix-cache.ts); undefined when it is off. */
  promptCache?: PrefixCacheStats | undefined;
  /** Speculative decoding's acceptance (runtime/speculative.ts); undefined when it is off. */
  speculative?: SpeculativeStats | undefined;
  /** Generations so far by how they ended. */
  requests: { completed: number; cancelled: number; failed: number };
  /** Closed-loop planning: the drift options, the latest drift found, the measured block times plans use. */
  drift: DriftStatus;
  /** The host's standby layers (host-standby-builds.ts); undefined without --standby-gb. */
  standby?: HostStandbyStatus | undefined;
  error: { code: string; message: string } | undefined;
}

export interface SessionHostEvents {
  plan: [plan: PlanJson];
  assigned: [stage: StageStatus];
  /** At most a few a second per member (engine/progress-rate.ts), always the final one; rate in bytes/s, null until measured. */
  'weights-progress': [p: { peer: number; name: string; receivedBytes: number; totalBytes: number; bytesPerSecond: number | null; etaSeconds: number | null; final: boolean }];
  ready: [stage: StageStatus];
  serving: [];
  recovering: [reason: string];
  waiting: [reason: string];
  recovered: [record: RecoveryRecord];
  /** A re-plan because a stage's measured time drifted off its prediction (after its `recovered`). */
  replanned: [r: DriftReplan];
  /** Something to tell the user that did not stop the ring, e.g. a member that sent malformed ring data (planned out) or NaN activations. */
  warning: [err: KiwiError];
  error: [err: KiwiError];
}

/** The means of the ring engine's recent step timings (null before any step). */
export function ringTiming(t: readonly StepTiming[], inFlight: number): RingTiming {
  const mean = (f: (x: StepTiming) => number): number | null => (t.length === 0 ? null : t.reduce((a, x) => a + f(x), 0) / t.length);
  return { steps: t.length, meanRingMs: mean((x) => x.ringMs), meanHostMs: mean((x) => x.hostMs), meanStageMs: meanByKey(t.map((x) => x.stageMs)), inFlight };
}

function meanByKey(records: ReadonlyArray<Record<string, number>>): Record<string, number> {
  const sums = new Map<string, { total: number; n: number }>();
  for (const r of records) {
    for (const [k, v] of Object.entries(r)) {
      const s = sums.get(k) ?? { total: 0, n: 0 };
      s.total += v;
      s.n++;
      sums.set(k, s);
    }
  }
  return Object.fromEntries([...sums].map(([k, s]) => [k, s.total / s.n]));
}
