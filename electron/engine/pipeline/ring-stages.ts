// The stages of the ring being built (then served), by peer, and what members report about their
// own: taking the assignment, asking for weights and acknowledging them, ready (or kept), failed.
// Reports about an earlier assignment (another epoch) are stale and dropped.
import { isKiwiError, KiwiError, knownCodeOr } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import { bytesMoved, stageReported, type RingAssignment, type StageStatus } from './ring-assignment.js';
import type { MemberToHostBody } from './ring-protocol.js';
import type { SessionHostEvents } from './session-host-api.js';
import type { WeightsSender } from './weights-sender.js';

export type StageReport = Extract<MemberToHostBody, { kind: 'assigned' | 'weights-request' | 'weights-progress' | 'opening' | 'ready' | 'failed' }>;

export interface RingStagesEvents {
  emit<K extends 'assigned' | 'ready' | 'weights-progress' | 'error'>(event: K, ...args: SessionHostEvents[K]): void;
  /** A member could not load its range: the ring being built fails with `err`. */
  loadFailed(err: KiwiError): void;
}

export class RingStages {
  /** By peer, the host (0) first. */
  private stages = new Map<number, StageStatus>();
  private memberPeers = new Map<string, number>();
  /** Each member's weights transfer, sampled for the weights-progress event (its messages come per MiB). */
  private readonly rates = new Map<string, ProgressRate>();

  constructor(
    private readonly weights: WeightsSender,
    private readonly on: RingStagesEvents,
  ) {}

  /** Tracks a new assignment's stages from now on; returns the map the ring's readiness is read from. */
  assign(assignment: Pick<RingAssignment, 'stages' | 'memberPeers'>): Map<number, StageStatus> {
    this.stages = assignment.stages;
    this.memberPeers = assignment.memberPeers;
    return this.stages;
  }

  peerOf(memberId: string): number | undefined {
    return this.memberPeers.get(memberId);
  }

  list(): StageStatus[] {
    return [...this.stages.values()].map((s) => ({ ...s }));
  }

  /** Members whose stage failed to load. */
  failedMembers(): string[] {
    return [...this.memberPeers].filter(([, peer]) => this.stages.get(peer)?.state === 'failed').map(([id]) => id);
  }

  bytesMoved(): number {
    return bytesMoved(this.stages);
  }

  /** Applies a member's report on its stage of `epoch` (the latest assigned); false when it has none or the report is stale. */
  report(memberId: string, body: StageReport, epoch: number): boolean {
    const peer = this.memberPeers.get(memberId);
    const stage = peer !== undefined ? this.stages.get(peer) : undefined;
    if (stage === undefined) return false;
    if ((body.kind === 'assigned' || body.kind === 'opening' || body.kind === 'ready' || body.kind === 'failed') && body.epoch !== undefined && body.epoch !== epoch) return false;
    if (body.kind === 'weights-request') {
      void this.weights.send(memberId, body.spans).catch((err: unknown) => {
        // The host's own disk failing (a moved or unreadable model file) ends this transfer, never the host.
        this.on.emit('error', isKiwiError(err) ? err : new KiwiError('WEIGHTS_TRANSFER_FAILED', `Reading the model file for ${stage.name} failed: ${(err as Error).message ?? String(err)}. Check that the model file is still there and readable.`));
      });
    } else if (body.kind === 'weights-progress') {
      this.weights.acknowledge(memberId, body.receivedBytes);
      let rate = this.rates.get(memberId);
      if (rate === undefined) this.rates.set(memberId, (rate = new ProgressRate()));
      const p = rate.update(body.receivedBytes, body.totalBytes);
      if (p !== null) {
        this.on.emit('weights-progress', {
          peer: stage.peer, name: stage.name, receivedBytes: body.receivedBytes, totalBytes: body.totalBytes, bytesPerSecond: p.rate, etaSeconds: p.etaSeconds, final: p.final,
        });
      }
    } else {
      const next = stageReported(stage, body);
      this.stages.set(stage.peer, next);
      if (body.kind === 'failed') this.on.loadFailed(new KiwiError(knownCodeOr(body.code, 'RING_STAGE_FAILED'), `${stage.name} could not load layers ${stage.start}-${stage.end}: ${body.message}`));
      else if (body.kind !== 'opening') this.on.emit(body.kind, { ...next });
    }
    return true;
  }
}
