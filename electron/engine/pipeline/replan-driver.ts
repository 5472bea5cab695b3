// The re-plan/recovery driver. A ring member whose links or control connection close, who falls
// silent past the heartbeat timeout, or who asks to leave, starts a re-plan: the generator holds
// its requests (steps in flight fail into the hold), the planner plans the members left (its
// admission check decides whether they can hold the model), members load their new ranges (a
// member whose range did not change keeps its stage), and a new ring epoch starts, on which every
// held request rebuilds its caches (its prompt as a prefill, then one decode step per token it had
// generated, ring-generator.ts) and carries on bit for bit. When the members left cannot hold the
// model the host waits for one to return, up to recoveryTimeoutMs, then fails the waiting requests
// with RING_UNAVAILABLE. A member that returns, or a new one, is planned in at a safe point (the
// generator holds, steps in flight finish, the ring is rebuilt). One re-plan runs at a time; a
// request during one makes it go round again. Phase changes go through ring-phase.ts; SessionHost
// supplies the ring building and its view of the session (ReplanHost).
import { isKiwiError, KiwiError } from '../errors.js';
import type { SegmentedStage } from '../runtime/stage-segments.js';
import type { RingEngine } from './ring-engine.js';
import type { RingGenerator } from './ring-generator.js';
import type { RecoveryRecord, RingPhaseEvent, RingPhaseState } from './ring-phase.js';
import type { RingStage } from './session-fleet.js';

/** After a fault, signals of the same event (a closed link, then the closed control connection) arrive together. */
const FAULT_GRACE_MS = 250;
/**
 * After a ring link went down: how long to wait for one of its ends to show as gone (a killed
 * member's control connection closes a moment after its links) before planning as if both live
 * (a partition between them). Planning too early plans in the dead member, and the re-plan retries.
 */
const SUSPECT_WAIT_MS = 1500;

/** The ring being served: its epoch, stages in ring order, the members in it and the host's first blocks. */
export interface ServedRing {
  /** The assignments' epoch (every attempt at a ring uses one, so stale messages are told apart). */
  epoch: number;
  /** Rings served so far, this one included: what status() calls the ring's epoch. */
  generation: number;
  order: RingStage[];
  memberIds: string[];
  first: SegmentedStage | undefined;
  engine: RingEngine;
}

export interface ReplanEvents {
  recovering: [reason: string];
  waiting: [message: string];
  recovered: [record: RecoveryRecord];
  error: [err: KiwiError];
}

/** What the driver needs of SessionHost. */
export interface ReplanHost {
  readonly options: { recoveryTimeoutMs?: number; rejoinDelayMs?: number; maxInFlight?: number };
  state(): RingPhaseState;
  dispatch(event: RingPhaseEvent): void;
  emit<K extends keyof ReplanEvents>(event: K, ...args: ReplanEvents[K]): void;
  /** Undefined until the first ring serves: nothing to re-plan before. */
  generator(): RingGenerator | undefined;
  ring(): ServedRing | undefined;
  /** Serves `ring` from now on. */
  adopt(ring: ServedRing): void;
  /** Plans, assigns and loads a ring over the eligible members; throws a KiwiError when it cannot. */
  buildRing(): Promise<ServedRing>;
  /** The order the planner would choose over the eligible members now; throws a KiwiError when none. */
  planOrder(): readonly RingStage[];
  /** A re-plan asked for `reason` was not made: the plan would not change. */
  unchanged(reason: string): void;
  /** Resolves once `ready()` holds (re-checked on every change), rejects SESSION_TIMEOUT after timeoutMs. */
  until(ready: () => boolean, what: string, timeoutMs: number): Promise<void>;
  /** Wakes every until() to re-check. */
  poke(): void;
  /** Peers of the active, connected members. */
  activePeers(): number[];
  /** An eligible member that the latest plan does not include. */
  hasUnplannedMember(): boolean;
  /** Members whose stage failed to load in the ring being built. */
  failedMembers(): string[];
  /** Members that asked to leave and are not among `inRing` may go. */
  releaseLeavers(inRing: readonly string[]): void;
  /** Weight bytes members received for the ring just built. */
  bytesMoved(): number;
}

export class ReplanDriver {
  /** Members whose load failed during the re-plan under way: the next attempt plans without them. */
  readonly failedLoads = new Set<string>();
  /** Peers at the ends of ring links that went down, until the re-plan: maybe gone, maybe partitioned. */
  private readonly suspects = new Set<number>();
  /** Bumped on every membership change, so waits for "someone came back" notice it. */
  private membershipVersion = 0;
  /** Why the next re-plan is needed, while one is pending. */
  private reason: string | undefined;
  private running: Promise<void> | undefined;
  private rejoinTimer: NodeJS.Timeout | undefined;

  constructor(private readonly host: ReplanHost) {}

  membershipChanged(): void {
    this.membershipVersion++;
  }

  /** An end of a ring link that went down. */
  suspect(peer: number): void {
    this.suspects.add(peer);
  }

  /** The host is closing: no rejoin fires. */
  stop(): void {
    clearTimeout(this.rejoinTimer);
  }

  /** Resolves once the re-plan under way, if any, has stopped. */
  async settled(): Promise<void> {
    await this.running?.catch(() => undefined);
  }

  /**
   * A member joined or came back: plan it in shortly (others may follow), at a safe point. When the
   * timer fires the member may already be in a plan (it joined while the first ring formed and the
   * planner took it): then nothing is re-planned, unless `always` (a member's memory changed).
   */
  scheduleRejoin(name: string, always = false): void {
    if (this.host.state().phase === 'waiting') return; // the wait notices the change itself
    clearTimeout(this.rejoinTimer);
    this.rejoinTimer = setTimeout(() => {
      if (always || this.host.hasUnplannedMember()) this.request(`${name} joined`, false);
    }, this.host.options.rejoinDelayMs ?? 1000);
  }

  /**
   * Starts a re-plan, or makes the running one go round again. A fault retires the ring at once
   * (its steps in flight are held for recompute); otherwise steps in flight finish first.
   */
  request(reason: string, fault: boolean): void {
    const phase = this.host.state().phase;
    if (this.host.generator() === undefined || phase === 'closed' || phase === 'failed') return;
    if (fault) this.host.ring()?.engine.retire(new KiwiError('RING_REPLAN', reason));
    this.reason ??= reason;
    this.host.poke();
    this.running ??= this.loop().finally(() => {
      this.running = undefined;
    });
  }

  private get closed(): boolean {
    return this.host.state().phase === 'closed';
  }

  private async loop(): Promise<void> {
    const host = this.host;
    const generator = host.generator()!;
    while (this.reason !== undefined && !this.closed) {
      const reason = this.reason;
      const fault = host.ring()?.engine.isRetired !== false;
      const startedAt = Date.now();
      if (!fault && !this.worthReplanning()) {
        this.reason = undefined;
        host.unchanged(reason);
        break;
      }
      host.dispatch({ type: 'replan-started', reason, at: startedAt });
      host.emit('recovering', reason);
      await generator.hold();
      host.ring()?.engine.retire(new KiwiError('RING_REPLAN', reason));
      if (fault) await this.settleSuspects();
      this.reason = undefined;
      const ring = await this.nextRing(reason, startedAt);
      if (ring === undefined) return; // closed
      if (this.closed) {
        ring.engine.retire(new KiwiError('SESSION_ENDED', 'The host is closing.'));
        await ring.first?.disposeExcept(host.ring()?.first);
        return;
      }
      host.adopt(ring);
      const resumedRequests = generator.resume(ring.engine, { maxInFlight: host.options.maxInFlight ?? ring.order.length });
      const record: RecoveryRecord = { epoch: ring.generation, reason, startedAt, durationMs: Date.now() - startedAt, bytesMoved: host.bytesMoved(), resumedRequests };
      this.failedLoads.clear();
      // The record is listed, the wait and the error cleared and the phase serving in one step.
      host.dispatch({ type: 'ring-recovered', record });
      host.releaseLeavers(ring.memberIds);
      host.emit('recovered', record);
    }
  }

  /** Waits until a suspect member shows as gone, or briefly when there is none (see SUSPECT_WAIT_MS). */
  private async settleSuspects(): Promise<void> {
    const suspects = [...this.suspects];
    this.suspects.clear();
    if (suspects.length === 0) return sleep(FAULT_GRACE_MS);
    const gone = (): boolean => {
      const here = new Set(this.host.activePeers());
      return suspects.some((p) => !here.has(p));
    };
    await this.host.until(gone, 'a member at the end of the broken link to go', SUSPECT_WAIT_MS).catch((err: unknown) => {
      if (!isKiwiError(err, 'SESSION_TIMEOUT')) throw err;
    });
  }

  /** A join re-plans only when the plan would change (a member the planner leaves out costs nothing). */
  private worthReplanning(): boolean {
    const ring = this.host.ring();
    if (ring === undefined) return true;
    try {
      return JSON.stringify(this.host.planOrder()) !== JSON.stringify(ring.order);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      return false;
    }
  }

  /**
   * Builds the next ring from whoever is eligible, retrying when someone drops out meanwhile; when
   * the members cannot hold the model, waits for a change in membership, failing the held requests
   * once recoveryTimeoutMs has passed. Undefined when the host closed.
   */
  private async nextRing(reason: string, startedAt: number): Promise<ServedRing | undefined> {
    const host = this.host;
    const generator = host.generator()!;
    const timeoutMs = host.options.recoveryTimeoutMs ?? 120_000;
    const deadline = startedAt + timeoutMs;
    let failedWaiting = false;
    for (;;) {
      if (this.closed) return undefined;
      const version = this.membershipVersion;
      try {
        return await host.buildRing();
      } catch (err) {
        if (!isKiwiError(err) || this.closed) return undefined;
        if (err.code !== 'PLAN_INSUFFICIENT_MEMORY') {
          // Someone dropped out or failed to load during the re-plan: plan again over who is left.
          for (const id of host.failedMembers()) this.failedLoads.add(id);
          host.emit('error', err);
          await sleep(FAULT_GRACE_MS);
          continue;
        }
        const error = new KiwiError('RING_UNAVAILABLE', `The members left cannot hold the model (${err.message}) after ${reason}; waiting for a member to return or join.`);
        host.dispatch({ type: 'ring-unavailable', error, until: failedWaiting ? undefined : deadline });
        // Members that asked to leave need not wait for a ring that may never come.
        host.releaseLeavers([]);
        host.emit('waiting', error.message);
        try {
          await host.until(() => this.membershipVersion !== version, 'a member to return', failedWaiting ? 24 * 3600_000 : Math.max(1, deadline - Date.now()));
        } catch (waitErr) {
          if (!isKiwiError(waitErr, 'SESSION_TIMEOUT')) return undefined;
          failedWaiting = true;
          host.dispatch({ type: 'wait-timed-out' });
          generator.failWaiting(new KiwiError('RING_UNAVAILABLE', `The ring lost members (${reason}) and the rest cannot hold the model; none returned within ${Math.round(timeoutMs / 1000)} s. Retry once a member rejoins.`));
          continue;
        }
        // Let a returning member settle (its links, its capabilities) before planning.
        await sleep(host.options.rejoinDelayMs ?? 1000);
        if (this.closed) return undefined;
        host.dispatch({ type: 'members-changed' });
      }
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
