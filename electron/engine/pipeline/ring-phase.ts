// The ring's phase as a pure reducer (the house pattern of session/membership.ts): SessionHost
// changes its phase, the re-plan under way, the completed re-plans, the deadline of a wait and
// the error it reports only through apply(event, state); time comes in on the events. Invariant:
// once closed the phase stays closed (the other fields still record what happened).
import type { KiwiError } from '../errors.js';

/** recovering: a re-plan is under way (requests are held); waiting: the members left cannot hold the model. */
export type Phase = 'gathering' | 'planning' | 'loading' | 'serving' | 'recovering' | 'waiting' | 'failed' | 'closed';

/** One re-plan that completed: why, how long requests waited, what it moved. */
export interface RecoveryRecord {
  epoch: number;
  reason: string;
  startedAt: number;
  durationMs: number;
  /** Weight bytes members received (from the host or the model's URL) to load their new ranges. */
  bytesMoved: number;
  /** Requests that were live and carried on by recompute. */
  resumedRequests: number;
}

/** Completed re-plans kept for status(), newest last. */
export const MAX_RECOVERIES_SHOWN = 16;

export interface RingPhaseState {
  readonly phase: Phase;
  /** The re-plan under way. */
  readonly recovery: { readonly reason: string; readonly startedAt: number } | undefined;
  readonly recoveries: readonly RecoveryRecord[];
  /** While waiting for members: when held requests fail (epoch ms); undefined once they have. */
  readonly waitingUntil: number | undefined;
  readonly error: KiwiError | undefined;
}

export type RingPhaseEvent =
  /** Members gathered: the first plan is being made. */
  | { type: 'planning-started' }
  /** The first ring's members were assigned their ranges and load them. */
  | { type: 'loading-started' }
  /** The first ring is attached to the backend. */
  | { type: 'first-ring-served' }
  /** Forming the first ring failed: the host serves nothing. */
  | { type: 'forming-failed'; error: KiwiError }
  /** A member could not load its range (the ring being built fails with this error). */
  | { type: 'stage-load-failed'; error: KiwiError }
  /** A re-plan began (requests are held from now). */
  | { type: 'replan-started'; reason: string; at: number }
  /** The members left cannot hold the model; held requests fail at `until` (undefined: they already did). */
  | { type: 'ring-unavailable'; error: KiwiError; until: number | undefined }
  /** No member returned before the deadline: the held requests failed. */
  | { type: 'wait-timed-out' }
  /** Membership changed during the wait: the re-plan tries again. */
  | { type: 'members-changed' }
  /** The re-plan built a ring and the held requests resumed on it. */
  | { type: 'ring-recovered'; record: RecoveryRecord }
  | { type: 'closed' };

export const INITIAL_RING_PHASE: RingPhaseState = { phase: 'gathering', recovery: undefined, recoveries: [], waitingUntil: undefined, error: undefined };

export function apply(event: RingPhaseEvent, state: RingPhaseState): RingPhaseState {
  /** Every phase but `closed` is left behind by closing. */
  const to = (phase: Exclude<Phase, 'closed'>): Phase => (state.phase === 'closed' ? 'closed' : phase);
  switch (event.type) {
    case 'planning-started':
      return { ...state, phase: to('planning') };
    case 'loading-started':
      return { ...state, phase: to('loading') };
    case 'first-ring-served':
      return { ...state, phase: to('serving') };
    case 'forming-failed':
      return { ...state, phase: to('failed'), error: event.error };
    case 'stage-load-failed':
      return { ...state, error: event.error };
    case 'replan-started':
      return { ...state, phase: to('recovering'), recovery: { reason: event.reason, startedAt: event.at } };
    case 'ring-unavailable':
      return { ...state, phase: to('waiting'), error: event.error, waitingUntil: event.until };
    case 'wait-timed-out':
      return { ...state, waitingUntil: undefined };
    case 'members-changed':
      return { ...state, phase: to('recovering') };
    case 'ring-recovered':
      // One step: the record is in the list by the time the phase reads serving.
      return {
        phase: to('serving'),
        recovery: undefined,
        recoveries: [...state.recoveries, event.record].slice(-MAX_RECOVERIES_SHOWN),
        waitingUntil: undefined,
        error: undefined,
      };
    case 'closed':
      return { ...state, phase: 'closed' };
  }
}
