// A member's standby layers (issue 15): after its stage is ready it asks the host for a standby
// plan (the layers beside its range that fit its --standby-gb disk budget, standby.ts) and fetches
// them in the background at low priority: one span at a time, at most `rateBytesPerSecond` on
// average (a pause after each span), stopped while a new assignment loads (pause()), from the
// model's URL or the host's range server with the token of its weights plan, each span verified
// against the host's sha256 like any transfer (span-fetch.ts). They are kept raw, as verified
// spans of the member's partial GGUF (member-weights.ts). Once all are on disk they are built into
// the shard cache, one layer at a time on one worker thread (a core; the stage keeps its own)
// whenever its stage has been quiet for a while (a recovery's replays and the
// streams come first), and their raw bytes are released: a re-plan that gives the member these layers
// then receives nothing and opens them as cached layers, with no conversion on the recovery's
// critical path (a survivor's 8B load: about 2 s from built layers against 5.5 s building them).
// Not under a memory budget (--memory-mb): a build holds about one built layer beyond the stage.
// The disk budget counts these layers only (the stage's own layers live in the shard cache,
// outside it); standby layers the next plan no longer names are released (punched out) when it
// arrives. After each layer the member tells the host what it holds on disk (ring-member.ts
// reportHolds, heldChanged here).
import { setTimeout as sleep } from 'node:timers/promises';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import type { ShardCache } from '../runtime/shard-cache.js';
import type { ExecutionProvider } from '../ort/session.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { buildIntoCache } from '../runtime/stage.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import { builtSpans, layerSpans, partialCacheSource, tagOf } from './member-layers.js';
import { PartialModel, type HashedSpan } from './member-weights.js';
import { builtStandbyBudget } from './standby.js';
import type { Assign, MemberToHostBody, StandbyPlan, WeightsPlan } from './ring-protocol.js';
import { fetchSpans } from './span-fetch.js';

/** Default cap of the background fetch: well below a LAN link, so ring steps keep the link and the cores. */
export const STANDBY_RATE_BYTES_PER_S = 32 * 2 ** 20;

export interface StandbyOptions {
  /** Disk for standby layers, bytes (--standby-gb). */
  budgetBytes: number;
  rateBytesPerSecond?: number;
  /** Build the fetched layers into the shard cache (default yes, where there is one). */
  build?: boolean;
}

/** Standby layers within `budgetBytes` of disk; under a memory budget they stay raw (a build's transient memory is not in it). */
export function standbyOptions(budgetBytes: number, memoryBudget: boolean): StandbyOptions {
  return { budgetBytes, ...(memoryBudget ? { build: false } : {}) };
}

export interface StandbyStatus {
  budgetBytes: number;
  state: 'waiting' | 'fetching' | 'building' | 'paused' | 'done';
  epoch: number | undefined;
  /** Standby layers verified on disk (or built), and their bytes. */
  layers: number[];
  heldBytes: number;
  /** Bytes fetched for standby layers since this member started. */
  fetchedBytes: number;
}

export interface StandbyIo {
  send: (body: MemberToHostBody) => void;
  /** The standby layers on disk changed (status().layers): the member tells the host what it holds. */
  heldChanged: () => void;
  /** Resolves when the member's stage is quiet (or `signal` aborts): each layer's build waits for it. */
  idle?: (signal: AbortSignal) => Promise<void>;
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
    private readonly opts: StandbyOptions & { weightsDir: string; cache?: ShardCache; provider?: ExecutionProvider },
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
    void this.rawBudget(a).then((budgetBytes) => {
      if (this.context?.a === a) this.io.send({ kind: 'standby-request', epoch: a.epoch, budgetBytes });
    }).catch((err: unknown) => {
      if (!isKiwiError(err)) this.io.warning(new KiwiError('WEIGHTS_TRANSFER_FAILED', `Standby layers could not be asked for: ${String(err)}`));
    });
  }

  /**
   * GGUF bytes of standby layers that fit the disk budget: built, a layer takes the runtime's packed
   * size (model-sizes.ts blockResidentBytes; Q4_0 about 1.3x its GGUF bytes), raw its own.
   */
  private async rawBudget(a: Assign): Promise<number> {
    if (this.opts.cache === undefined || this.opts.build === false) return this.opts.budgetBytes;
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    const sizes = modelSizesFromGguf(await openGguf(partial.path));
    return builtStandbyBudget(sizes, this.opts.budgetBytes);
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
    let budget = await this.rawBudget(a);
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
    this.io.heldChanged();
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
      this.io.heldChanged();
    }
    await this.build(a, file, partial, layers, signal);
    if (signal.aborted) return;
    this.state = 'done';
    this.io.done(this.status());
  }

  /**
   * Builds the standby layers not built yet into the shard cache, a layer per build so that a new
   * assignment (pause()) waits for one layer at most, then frees their raw bytes.
   */
  private async build(a: Assign, file: GgufFile, partial: PartialModel, layers: StandbyPlan['layers'], signal: AbortSignal): Promise<void> {
    const cache = this.opts.cache;
    if (cache === undefined || this.opts.build === false || layers.length === 0) return; // as rawBudget() assumed
    this.state = 'building';
    const spans = layers.flatMap((l) => l.spans);
    const source = partialCacheSource(file, spans, (s) => partial.holds(s));
    const shape = await modelShapeFromGguf(file, { maxPositions: a.maxPositions });
    const built = await cache.builtLayerTags(a.model.fingerprint);
    for (const l of layers) {
      if (built.has(source.layerTag!(l.layer))) continue;
      await this.io.idle?.(signal);
      if (signal.aborted) return;
      await buildIntoCache(file, shape, { start: l.layer, end: l.layer + 1, head: false }, {
        cache, cacheSource: source, replayInputs: true, ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}), ...(a.layout !== undefined ? { weightLayout: a.layout } : {}),
      });
    }
    await partial.release(builtSpans(file, spans, await cache.builtLayerTags(a.model.fingerprint)));
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
}
