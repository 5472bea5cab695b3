// A member's standby layers (issue 15): after its stage is ready it asks the host for a standby
// plan (the layers beside its range that fit its --standby-gb disk budget, standby.ts) and fetches
// them in the background at low priority: one span at a time, at most `rateBytesPerSecond` on
// average (a pause after each span), stopped while a new assignment loads (pause()), from the
// model's URL or the host's range server with the token of its weights plan, each span verified
// against the host's sha256 like any transfer (span-fetch.ts). They are kept raw, as verified
// spans of the member's partial GGUF (member-weights.ts), not built: building a layer costs about
// what decoding a long answer does on the member's cores, while the raw bytes cost only disk; a
// re-plan that gives the member these layers finds them verified and receives nothing (the
// shard build of those layers then runs from local disk). The disk budget counts these layers
// only (the stage's own layers live in the shard cache, outside it); standby layers the next plan
// no longer names are released (punched out) when it arrives. After each layer the member tells
// the host what it holds on disk (holds: its stage and its standby layers).
import { setTimeout as sleep } from 'node:timers/promises';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { ShardCache } from '../runtime/shard-cache.js';
import { layerSpans, tagOf } from './member-layers.js';
import { PartialModel, type HashedSpan } from './member-weights.js';
import type { Assign, MemberToHostBody, StandbyPlan, WeightsPlan } from './ring-protocol.js';
import { fetchSpans } from './span-fetch.js';
import { layerRanges } from './standby.js';

/** Default cap of the background fetch: well below a LAN link, so ring steps keep the link and the cores. */
export const STANDBY_RATE_BYTES_PER_S = 32 * 2 ** 20;

export interface StandbyOptions {
  /** Disk for standby layers, bytes (--standby-gb). */
  budgetBytes: number;
  rateBytesPerSecond?: number;
}

export interface StandbyStatus {
  budgetBytes: number;
  state: 'waiting' | 'fetching' | 'paused' | 'done';
  epoch: number | undefined;
  /** Standby layers verified on disk (or built), and their bytes. */
  layers: number[];
  heldBytes: number;
  /** Bytes fetched for standby layers since this member started. */
  fetchedBytes: number;
}

export interface StandbyIo {
  send: (body: MemberToHostBody) => void;
  /** A standby plan was worked through (every layer held, or the fetch stopped on a failure). */
  done: (s: StandbyStatus) => void;
  warning: (err: KiwiError) => void;
}

interface Context {
  a: Assign;
  plan: WeightsPlan;
}

export class StandbyKeeper {
  private context: Context | undefined;
  private run: { abort: AbortController; done: Promise<void> } | undefined;
  private state: StandbyStatus['state'] = 'waiting';
  private held = new Map<number, number>();
  private previous: StandbyPlan['layers'] = [];
  private fetchedBytes = 0;

  constructor(
    private readonly opts: StandbyOptions & { weightsDir: string; cache?: ShardCache },
    private readonly io: StandbyIo,
  ) {}

  status(): StandbyStatus {
    return {
      budgetBytes: this.opts.budgetBytes, state: this.state, epoch: this.context?.a.epoch,
      layers: [...this.held.keys()].sort((x, y) => x - y), heldBytes: [...this.held.values()].reduce((n, b) => n + b, 0), fetchedBytes: this.fetchedBytes,
    };
  }

  /** The stage of `a` is ready, its weights received per `plan`: ask the host for a standby plan. */
  ready(a: Assign, plan: WeightsPlan): void {
    this.context = { a, plan };
    this.state = 'waiting';
    this.reportHolds();
    this.io.send({ kind: 'standby-request', epoch: a.epoch, budgetBytes: this.opts.budgetBytes });
  }

  /** A new assignment: the fetch stops (the load needs the disk and the network) and resolves once it has. */
  async pause(): Promise<void> {
    this.context = undefined;
    const run = this.run;
    this.run = undefined;
    if (run === undefined) return;
    this.state = 'paused';
    run.abort.abort();
    await run.done;
  }

  /** The host's standby plan for the current assignment: fetches what is not on disk yet. */
  plan(p: StandbyPlan): void {
    const ctx = this.context;
    if (ctx === undefined || ctx.a.epoch !== p.epoch || this.run !== undefined) return;
    const abort = new AbortController();
    const done = this.fetch(ctx, p, abort.signal).catch((err: unknown) => {
      if (abort.signal.aborted) return;
      this.io.warning(isKiwiError(err) ? err : new KiwiError('WEIGHTS_TRANSFER_FAILED', `Standby layers could not be fetched: ${String(err)}`));
    }).finally(() => {
      if (this.run?.abort === abort) this.run = undefined;
    });
    this.run = { abort, done };
  }

  private async fetch(ctx: Context, p: StandbyPlan, signal: AbortSignal): Promise<void> {
    const { a, plan } = ctx;
    this.state = 'fetching';
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    const file = await openGguf(partial.path);
    const built = this.opts.cache !== undefined ? await this.opts.cache.builtLayerTags(a.model.fingerprint) : new Set<string>();
    // The host's choice, held to this member's own budget (nothing past the first layer that does not fit).
    const layers: StandbyPlan['layers'] = [];
    let budget = this.opts.budgetBytes;
    for (const l of p.layers) {
      const bytes = l.spans.reduce((n, s) => n + s.bytes, 0);
      if (bytes > budget || (l.layer >= a.start && l.layer < a.end)) break;
      budget -= bytes;
      layers.push(l);
    }
    // Standby layers the new plan no longer names leave the disk (unless the stage now runs them).
    const named = new Set(layers.map((l) => l.layer));
    for (const old of this.previous) if (!named.has(old.layer) && (old.layer < a.start || old.layer >= a.end)) await partial.release(old.spans);
    this.previous = layers;
    this.held = new Map();
    const sources = [
      ...(a.model.url !== undefined ? [{ url: a.model.url }] : []),
      ...(plan.http?.urls ?? []).map((url) => ({ url, token: plan.http!.token })),
    ];
    for (const l of layers) {
      if (signal.aborted) return;
      // A layer built in the shard cache (an earlier range) needs only what is not part of it.
      const own = layerSpans(file, l.spans).layers.get(l.layer) ?? [];
      const isBuilt = own.length > 0 && built.has(tagOf(own));
      const missing = partial.missing(isBuilt ? l.spans.filter((s) => !own.includes(s)) : l.spans);
      for (const s of missing) await this.fetchSpan(s, partial, sources, signal);
      if (signal.aborted) return;
      this.held.set(l.layer, l.spans.reduce((n, s) => n + s.bytes, 0));
      this.reportHolds();
    }
    this.state = 'done';
    this.io.done(this.status());
  }

  /** One span from the first source that serves it, then a pause that keeps the average rate under the cap. */
  private async fetchSpan(s: HashedSpan, partial: PartialModel, sources: ReadonlyArray<{ url: string; token?: string }>, signal: AbortSignal): Promise<void> {
    const t0 = performance.now();
    let last: unknown = new KiwiError('WEIGHTS_TRANSFER_FAILED', 'No source to fetch standby layers from (the host serves no range server: --weights-http off, or relay only).');
    for (const { url, token } of sources) {
      try {
        await fetchSpans(url, [s], partial, (n) => void (this.fetchedBytes += n), { parallel: 1, signal, ...(token !== undefined ? { token } : {}) });
        last = undefined;
        break;
      } catch (err) {
        if (signal.aborted) return;
        last = err;
      }
    }
    if (last !== undefined) throw last;
    const rate = this.opts.rateBytesPerSecond ?? STANDBY_RATE_BYTES_PER_S;
    const wait = (s.bytes / rate) * 1000 - (performance.now() - t0);
    if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => undefined);
  }

  private reportHolds(): void {
    const a = this.context?.a;
    if (a === undefined) return;
    const stage = Array.from({ length: a.end - a.start }, (_, i) => a.start + i);
    try {
      this.io.send({ kind: 'holds', ranges: layerRanges([...stage, ...this.held.keys()]) });
    } catch (err) {
      if (!isKiwiError(err)) throw err;
    }
  }
}
