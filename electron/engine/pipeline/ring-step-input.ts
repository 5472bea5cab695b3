// What a member stage takes from the previous stage, checked before it runs: the ring message's
// kind, the frame within the size its shape allows and in the wire its link agreed (tensor-frame.ts),
// its metadata, and rows that fit the caches this stage holds for their requests. A `free` event
// drops the caches of requests that ended; traffic of another ring epoch is dropped.
import { isKiwiError, KiwiError } from '../errors.js';
import type { PrefixKvStore } from '../runtime/prefix-cache-kv.js';
import { freeCache, rollbackCache, type KvCache } from '../runtime/kv-store.js';
import { decodeStepFrame, maxStepFrameBytes, type StepFrame } from '../transport/tensor-frame.js';
import { decodeRingEvent, encodeRingEvent, parseStepMetadata, RingKind, type Assign, type RingEvent } from './ring-protocol.js';

/** Rows of a batched decode step at most (the default frame limit's batch). */
const MAX_ROWS = 64;

/** A malformed step whose id is known (so its requests can be failed), or a cache out of step (recomputed, nobody's offence). */
export class StepError extends KiwiError {
  constructor(
    readonly step: number,
    message: string,
    readonly kind: 'malformed' | 'recoverable' = 'malformed',
  ) {
    super('RING_PROTOCOL', message);
  }
}

export type StepInput =
  | { kind: 'event'; event: RingEvent }
  | { kind: 'step'; frame: StepFrame; meta: ReturnType<typeof parseStepMetadata>; caches: KvCache[][]; batch: number; seq: number };

/** What of the stage the check needs: its hidden size and fresh caches for new requests (one per segment of the stage, stage-segments.ts). */
export interface StageCaches {
  shape: { hidden: number };
  emptyCache: (capacity: number) => KvCache[];
}

/**
 * Decodes and checks one message from the previous stage against assignment `a`; a new request's
 * cache is created in `caches`. Throws what is malformed (a StepError once the step id is known);
 * undefined: another epoch's traffic, dropped. maxFrameBytes: default what the shape allows.
 * `prefixes`: this stage's part of the prompt cache (entries kept, dropped, and seeding new requests).
 * `adopt`: a request rebuilt after a re-plan (its rows say `keep`) starts from the caches the
 * previous stage kept of it (runtime/stage-keep.ts), where there are any.
 */
export async function checkStepInput(
  a: Assign,
  stage: StageCaches,
  caches: Map<number, KvCache[]>,
  msg: Uint8Array,
  maxFrameBytes?: number,
  prefixes?: PrefixKvStore,
  adopt?: (id: number, cap: number, keep: number) => KvCache[] | undefined,
): Promise<StepInput | undefined> {
  const kind = msg[0];
  if (kind === RingKind.EVENT) {
    const event = decodeRingEvent(msg.subarray(1));
    if (event.type === 'free') {
      for (const k of event.keep ?? []) {
        const c = caches.get(k.id);
        if (c !== undefined && c[0]!.length >= k.length) prefixes?.keep(k.entry, c, k.length);
      }
      prefixes?.drop(event.drop ?? []);
      for (const id of event.ids) {
        const c = caches.get(id);
        for (const segment of c ?? []) freeCache(segment);
        caches.delete(id);
      }
    }
    if (event.type === 'step-failed' && event.epoch !== a.epoch) return undefined;
    return { kind: 'event', event };
  }
  if (kind !== RingKind.STEP) throw new KiwiError('RING_PROTOCOL', `Unknown ring message kind ${String(kind)}.`);
  const maxBytes = maxFrameBytes ?? maxStepFrameBytes({ hidden: stage.shape.hidden, maxRows: MAX_ROWS, maxSeq: a.maxPositions }, a.receive.tensor);
  const frame = await decodeStepFrame(msg.subarray(1), { maxBytes, hidden: stage.shape.hidden, expect: a.receive });
  const t = frame.tensor;
  const batch = t.dims[0];
  const seq = t.dims[1];
  const meta = parseStepMetadata(frame.metadata, batch);
  if (meta.epoch !== a.epoch) return undefined;
  const bad = (why: string): StepError => new StepError(meta.step, why);
  if (batch > 1 && seq !== 1) throw bad('A batched step must add one token per request.');
  if (new Set(meta.rows.map((r) => r.id)).size !== batch) throw bad('A step names one request twice.');
  const rowCaches = meta.rows.map((r) => {
    if (r.cap > a.maxPositions || r.pos + seq > r.cap) throw bad(`Request ${r.id} would hold ${r.pos + seq} positions in a cache of ${r.cap} (context ${a.maxPositions}).`);
    if (r.keep !== undefined && (batch !== 1 || r.pos + seq > r.keep || r.keep > r.cap)) throw bad(`Request ${r.id} rebuilds positions ${r.pos}-${r.pos + seq} of ${r.keep} kept in a cache of ${r.cap}: not one row within what it kept.`);
    let c = caches.get(r.id);
    if (c === undefined && r.pos === 0) {
      c = (r.keep !== undefined ? adopt?.(r.id, r.cap, r.keep) : undefined) ?? stage.emptyCache(r.cap);
      caches.set(r.id, c);
    }
    // A rebuilt request's segments hold `pos` positions (they run) or every position of the row (kept, skipped).
    if (c !== undefined && r.keep !== undefined) {
      if (c.some((segment) => segment.capacity !== r.cap || (segment.length !== r.pos && segment.length < r.pos + seq))) {
        throw new StepError(meta.step, `Request ${r.id} rebuilds positions ${r.pos}-${r.pos + seq} but this stage holds ${c.map((segment) => segment.length).join('/')} positions for it.`, 'recoverable');
      }
      return c;
    }
    // Seeded from a prompt-cache entry this stage holds (else the request is recomputed without it).
    if (c === undefined && r.from !== undefined) {
      c = prefixes?.seed(r.from, r.pos, r.cap);
      if (c !== undefined) caches.set(r.id, c);
    }
    // Every segment's cache holds the same positions: the first speaks for them.
    const first = c?.[0];
    // Positions past `pos` are speculative drafts the host rejected: dropped (exactly) before the step.
    if (c !== undefined && first!.length > r.pos && first!.capacity === r.cap) for (const segment of c) rollbackCache(segment, r.pos);
    if (c === undefined || first!.length !== r.pos || first!.capacity !== r.cap) {
      throw new StepError(meta.step, `Request ${r.id} is at position ${r.pos} but this stage holds ${first?.length ?? 'no'} positions for it.`, 'recoverable');
    }
    return c;
  });
  return { kind: 'step', frame, meta, caches: rowCaches, batch, seq };
}

/** The ring event that tells the host (through the rest of the ring) that step `step` failed with `err`. */
export function stepFailed(epoch: number, step: number, err: KiwiError): Uint8Array {
  return encodeRingEvent({ type: 'step-failed', epoch, step, code: err.code, message: err.message.slice(0, 1000) });
}

/**
 * What the previous stage `peer` sent that no honest Kiwi sends: `cause` ends its link, `fault`
 * (RING_PEER_MALFORMED, naming the peer and the cause's code) goes to the host.
 */
export function malformedFault(peer: number, err: unknown): { cause: KiwiError; fault: KiwiError } {
  const cause = isKiwiError(err) ? err : new KiwiError('RING_PROTOCOL', `A ring message could not be read: ${String(err instanceof Error ? err.message : err).slice(0, 300)}`);
  const fault = new KiwiError('RING_PEER_MALFORMED', `Peer ${peer} sent malformed ring data (${cause.code}): ${cause.message}`, { peer, cause: cause.code });
  return { cause, fault };
}
