// The host's standby layers (issue 15). The host holds the whole model file, so a re-plan that
// grows its blocks (the member after it was lost) never waits on the network; but it converts the
// added layers into the runtime's layout on the recovery's critical path (an 8B Q4_0 layer: about
// 1.5 s) unless they are built in its shard cache already. So once the ring serves (and, after a
// recovery, the resumed streams have caught up), the layers after the host's blocks that fit its
// disk budget (`kiwi host --standby-gb N`, counted in built bytes as a member's) are built into the
// shard cache, nearest first, one layer at a time on one worker thread, each once the ring has been
// quiet for a while; a re-plan stops the builds (stop() waits for the layer under way, at most one).
import { setTimeout as sleep } from 'node:timers/promises';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ExecutionProvider } from '../ort/session.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import type { DecoderShape } from '../runtime/stage-graph.js';
import type { ShardCache } from '../runtime/shard-cache.js';
import { buildIntoCache } from '../runtime/stage.js';
import type { WeightLayout } from '../runtime/weights/convert.js';
import { builtStandbyBudget, selectStandby } from './standby.js';

export interface HostStandbyOptions {
  /** Disk for the built standby layers, bytes. */
  budgetBytes: number;
  cache: ShardCache;
  provider?: ExecutionProvider;
  weightLayout?: WeightLayout;
  /** How long the ring must have run no step before a layer's build starts. */
  idleMs?: number;
}

export interface HostStandbyStatus {
  budgetBytes: number;
  state: 'waiting' | 'building' | 'done';
  /** Layers after the host's blocks that are built in the shard cache (those of the latest run). */
  layers: number[];
}

/** Quiet time before a standby layer's build, as a member's (ring-member.ts). */
const IDLE_MS = 2000;

export class HostStandbyBuilds {
  private run: { abort: AbortController; done: Promise<void> } | undefined;
  private state: HostStandbyStatus['state'] = 'waiting';
  private built: number[] = [];

  constructor(
    private readonly opts: HostStandbyOptions,
    /** When the ring last ran a step (performance.now()), or undefined if never. */
    private readonly lastStepAt: () => number | undefined,
    private readonly warning: (err: unknown) => void,
  ) {}

  status(): HostStandbyStatus {
    return { budgetBytes: this.opts.budgetBytes, state: this.state, layers: [...this.built] };
  }

  /** The ring serves with the host's blocks ending at `hostEnd`: builds what the budget holds after them. */
  start(file: GgufFile, shape: DecoderShape, hostEnd: number): void {
    if (this.run !== undefined) return;
    const abort = new AbortController();
    const done = this.buildAll(file, shape, hostEnd, abort.signal).catch((err: unknown) => {
      if (!abort.signal.aborted) this.warning(err);
    }).finally(() => {
      if (this.run?.abort === abort) this.run = undefined;
    });
    this.run = { abort, done };
  }

  /** A re-plan: no further layer starts; resolves once the one under way (if any) is built. */
  async stop(): Promise<void> {
    const run = this.run;
    this.run = undefined;
    this.state = 'waiting';
    if (run === undefined) return;
    run.abort.abort();
    await run.done;
  }

  private async buildAll(file: GgufFile, shape: DecoderShape, hostEnd: number, signal: AbortSignal): Promise<void> {
    const rawBudget = builtStandbyBudget(modelSizesFromGguf(file), this.opts.budgetBytes);
    const layers = selectStandby(file, { start: 0, end: hostEnd }, shape.blockCount, rawBudget).map((l) => l.layer);
    this.built = [];
    this.state = 'building';
    for (const layer of layers) {
      await this.whenIdle(signal);
      if (signal.aborted) return;
      // A layer built before (an earlier run, or a range the host ran) returns at once.
      await buildIntoCache(file, shape, { start: layer, end: layer + 1, head: false }, {
        cache: this.opts.cache, replayInputs: true,
        ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}),
        ...(this.opts.weightLayout !== undefined ? { weightLayout: this.opts.weightLayout } : {}),
      });
      this.built.push(layer);
    }
    if (!signal.aborted) this.state = 'done';
  }

  private async whenIdle(signal: AbortSignal): Promise<void> {
    const idleMs = this.opts.idleMs ?? IDLE_MS;
    for (let wait = 0; !signal.aborted && (wait = (this.lastStepAt() ?? -Infinity) + idleMs - performance.now()) > 0; ) {
      await sleep(wait, undefined, { signal }).catch(() => undefined);
    }
  }
}
