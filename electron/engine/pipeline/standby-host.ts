// The host's side of standby layers (issue 15): a member that keeps standby layers (--standby-gb)
// asks after each load (standby-request, with its disk budget); once the ring serves, the host
// picks the layers beside the member's range that fit (standby.ts), lets the member's own token
// read exactly those spans on the range server (weights-http.ts allow()), and sends their sha256 in
// a standby-plan (the member fetches them with the token of its weights plan). What each member then reports holding on disk (holds) goes into the next plan
// as held (ring-assignment.ts), so a re-plan prefers a division that uses it and the plan's
// fetch_bytes is 0 for those layers. A request of an older epoch is dropped; one that arrives
// while the ring is not serving waits for the next `serving`, or after a recovery until the
// resumed streams have rebuilt their caches (session-host.ts).
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { LayerRange } from '../runtime/layer-range.js';
import type { HashedSpan, Span } from './member-weights.js';
import type { HostToMemberBody, MemberToHostBody } from './ring-protocol.js';
import { selectStandby } from './standby.js';
import type { WeightsTokens } from './weights-http.js';

type StandbyMessage = Extract<MemberToHostBody, { kind: 'standby-request' | 'holds' }>;

export interface StandbyHostIo {
  file: () => GgufFile | undefined;
  blockCount: () => number;
  hash: (spans: readonly Span[]) => Promise<HashedSpan[]>;
  /** The latest epoch assigned, and whether its ring serves now with every resumed stream caught up (standby work may start). */
  epoch: () => number;
  serving: () => boolean;
  /** The member's stage in the latest plan, and the host's own blocks' end. */
  stageOf: (memberId: string) => LayerRange | undefined;
  hostEnd: () => number;
  http: () => { tokens: WeightsTokens } | undefined;
  send: (memberId: string, body: HostToMemberBody) => void;
}

export class StandbyHost {
  private readonly pending = new Map<string, { epoch: number; budgetBytes: number }>();
  private readonly held = new Map<string, LayerRange[]>();

  constructor(private readonly io: StandbyHostIo) {}

  /** What members reported holding on disk, by member id (planned as held). */
  get holds(): ReadonlyMap<string, readonly LayerRange[]> {
    return this.held;
  }

  onMessage(memberId: string, body: StandbyMessage): Promise<void> {
    if (body.kind === 'holds') {
      this.held.set(memberId, body.ranges.filter((r) => r.end > r.start));
      return Promise.resolve();
    }
    this.pending.set(memberId, { epoch: body.epoch, budgetBytes: body.budgetBytes });
    return this.flush();
  }

  /** A member that left or came back holds nothing the host knows of until it reports again. */
  forget(memberId: string): void {
    this.pending.delete(memberId);
    this.held.delete(memberId);
  }

  /** Answers the requests of the current epoch once its ring serves; older ones are dropped. */
  async flush(): Promise<void> {
    const file = this.io.file();
    if (file === undefined || !this.io.serving()) return;
    const epoch = this.io.epoch();
    for (const [memberId, req] of [...this.pending]) {
      this.pending.delete(memberId);
      const range = this.io.stageOf(memberId);
      if (req.epoch !== epoch || range === undefined) continue;
      await this.answer(memberId, file, range, epoch, req.budgetBytes);
    }
  }

  private async answer(memberId: string, file: GgufFile, range: LayerRange, epoch: number, budgetBytes: number): Promise<void> {
    const picked = selectStandby(file, range, this.io.blockCount(), budgetBytes, this.io.hostEnd());
    const layers = await Promise.all(picked.map(async (p) => ({ layer: p.layer, spans: await this.io.hash(p.spans) })));
    const served = this.io.http();
    // The member's token reads these spans too, from now until its next assignment narrows it.
    if (served !== undefined) await served.tokens.allow(memberId, picked.flatMap((p) => p.spans));
    this.io.send(memberId, { kind: 'standby-plan', epoch, layers });
  }
}
