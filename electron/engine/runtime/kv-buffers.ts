// The K/V buffers of a stage's request caches, on the thread that runs the stage's session (the
// worker thread of ort-worker.ts, or the calling thread for an in-thread session), where they stay
// for the caches' lifetime: a run reads them in place and writes the positions it added. Moving
// them to the session's thread and back for every run cost a full garbage collection in both
// threads every ~64 MB moved (V8 counts each arriving buffer as new external memory;
// bench/worker-kv.ts). The calling thread holds handles (kv-store.ts) and sends the operations.
import type { OrtFeeds, OrtTensor } from '../ort/session.js';
import { f32Tensor, tensorF32 } from '../ort/session.js';

/** The shape of one stage's caches: per layer K and V, each [kvHeads, allocated, headDim] f32. */
export interface KvLayout {
  layers: number;
  kvHeads: number;
  headDim: number;
}

/** What a run does with the caches of its rows (built by KvStore.run, carried out by runWithKv). */
export interface KvRun {
  /** Per row: its cache, the positions filled before this run, and the positions its buffers hold for it (after growth). */
  rows: { id: number; length: number; allocated: number }[];
  /** Positions each row adds. */
  seq: number;
  /** Per layer of the stage: the graph's input and output names. */
  names: { pastKey: string; pastValue: string; newKey: string; newValue: string }[];
}

/** One cache's buffers: per layer K and V, [kvHeads, allocated, headDim]. */
interface Held {
  allocated: number;
  keys: Float32Array[];
  values: Float32Array[];
}

export class KvBuffers {
  private readonly held = new Map<number, Held>();
  /** Caches whose buffers could not be made, with why (a run that uses one fails with it). */
  private readonly failed = new Map<number, string>();

  constructor(readonly layout: KvLayout) {}

  get size(): number {
    return this.held.size;
  }

  create(id: number, allocated: number): void {
    const size = this.layout.kvHeads * allocated * this.layout.headDim;
    const n = this.layout.layers;
    this.held.set(id, {
      allocated,
      keys: Array.from({ length: n }, () => new Float32Array(size)),
      values: Array.from({ length: n }, () => new Float32Array(size)),
    });
  }

  /** Cache `to` of `allocated` positions holding positions [0, length) of `from` (a prompt-cache copy). */
  copy(from: number, to: number, length: number, allocated: number): void {
    const src = this.get(from);
    this.held.set(to, { allocated, keys: src.keys.map((b) => this.moved(b, src.allocated, length, allocated)), values: src.values.map((b) => this.moved(b, src.allocated, length, allocated)) });
  }

  free(id: number): void {
    this.held.delete(id);
    this.failed.delete(id);
  }

  /** Cache `id` could not be made (`why`, a whole sentence): a run that uses it fails with it. */
  broken(id: number, why: string): void {
    this.held.delete(id);
    this.failed.set(id, why);
  }

  /** The buffers of cache `id` themselves, in-thread (tests fill and inspect them); they stay owned here. */
  buffers(id: number): { readonly allocated: number; readonly keys: readonly Float32Array[]; readonly values: readonly Float32Array[] } {
    return this.get(id);
  }

  /** Copies of positions [0, length) of cache `id`, per layer [kvHeads, length, headDim]. */
  read(id: number, length: number): { keys: Float32Array[]; values: Float32Array[] } {
    const h = this.get(id);
    if (length > h.allocated) throw new Error(`KV cache ${id}: ${length} positions asked of ${h.allocated}`);
    return { keys: h.keys.map((b) => this.moved(b, h.allocated, length, length)), values: h.values.map((b) => this.moved(b, h.allocated, length, length)) };
  }

  /** Grows cache `id`'s buffers to `allocated` positions, keeping its first `length`. */
  grow(id: number, length: number, allocated: number): void {
    const h = this.get(id);
    if (allocated === h.allocated) return;
    if (allocated < h.allocated || length > h.allocated) throw new Error(`KV cache ${id}: cannot resize ${h.allocated} positions to ${allocated} keeping ${length}`);
    h.keys = h.keys.map((b) => this.moved(b, h.allocated, length, allocated));
    h.values = h.values.map((b) => this.moved(b, h.allocated, length, allocated));
    h.allocated = allocated;
  }

  /** Per layer: the past K and V of `rows` as the graph reads them, [batch, kvHeads, cap, headDim]. */
  past(rows: KvRun['rows'], seq: number): { keys: Float32Array[]; values: Float32Array[]; cap: number } {
    const held = rows.map((r) => this.get(r.id));
    // One request uses its own buffers; a batch is packed (rebuilt every step, so it needs only
    // the positions in use).
    if (rows.length === 1) return { keys: held[0]!.keys, values: held[0]!.values, cap: held[0]!.allocated };
    const cap = Math.max(...rows.map((r) => r.length)) + seq;
    const pack = (pick: (h: Held) => Float32Array): Float32Array => {
      const { kvHeads, headDim } = this.layout;
      const out = new Float32Array(rows.length * kvHeads * cap * headDim);
      rows.forEach((r, b) => {
        const src = pick(held[b]!);
        for (let h = 0; h < kvHeads; h++) {
          const from = h * held[b]!.allocated * headDim;
          out.set(src.subarray(from, from + r.length * headDim), (b * kvHeads + h) * cap * headDim);
        }
      });
      return out;
    };
    return {
      keys: Array.from({ length: this.layout.layers }, (_, i) => pack((h) => h.keys[i]!)),
      values: Array.from({ length: this.layout.layers }, (_, i) => pack((h) => h.values[i]!)),
      cap,
    };
  }

  /** Writes row b's new positions of layer i ([batch, kvHeads, seq, headDim]) at [length, length + seq) of its cache. */
  writeNew(rows: KvRun['rows'], seq: number, i: number, freshK: Float32Array, freshV: Float32Array): void {
    const { kvHeads, headDim } = this.layout;
    rows.forEach((r, b) => {
      // A cache freed while its run was in flight (the request ended) takes nothing.
      const h = this.held.get(r.id);
      if (h === undefined) return;
      for (let head = 0; head < kvHeads; head++) {
        const from = (b * kvHeads + head) * seq * headDim;
        const to = (head * h.allocated + r.length) * headDim;
        h.keys[i]!.set(freshK.subarray(from, from + seq * headDim), to);
        h.values[i]!.set(freshV.subarray(from, from + seq * headDim), to);
      }
    });
  }

  private get(id: number): Held {
    const h = this.held.get(id);
    if (h !== undefined) return h;
    const why = this.failed.get(id);
    if (why !== undefined) throw new Error(why);
    throw new Error(`KV cache ${id} is not held by this stage (freed, or lost with its stage)`);
  }

  /** A buffer of `allocated` positions per head holding the first `length` of `old` (`had` per head). */
  private moved(old: Float32Array, had: number, length: number, allocated: number): Float32Array {
    const { kvHeads, headDim } = this.layout;
    const out = new Float32Array(kvHeads * allocated * headDim);
    for (let h = 0; h < kvHeads; h++) {
      const from = h * had * headDim;
      out.set(old.subarray(from, from + length * headDim), h * allocated * headDim);
    }
    return out;
  }
}

/**
 * Runs a stage's session over the caches of `kv.rows`, here where their buffers live: grows them,
 * feeds them as the past K/V (read in place), runs, and writes in the positions the run added.
 * Returns the outputs other than the new K/V.
 */
export async function runWithKv(
  buffers: KvBuffers,
  run: (feeds: OrtFeeds, fetches: readonly string[]) => Promise<Record<string, OrtTensor>>,
  feeds: OrtFeeds,
  fetches: readonly string[],
  kv: KvRun,
): Promise<Record<string, OrtTensor>> {
  const { kvHeads, headDim } = buffers.layout;
  for (const r of kv.rows) buffers.grow(r.id, r.length, r.allocated);
  const past = buffers.past(kv.rows, kv.seq);
  const batch = kv.rows.length;
  const allFeeds: OrtFeeds = { ...feeds };
  const allFetches = new Set(fetches);
  kv.names.forEach((n, i) => {
    allFeeds[n.pastKey] = f32Tensor(past.keys[i]!, [batch, kvHeads, past.cap, headDim]);
    allFeeds[n.pastValue] = f32Tensor(past.values[i]!, [batch, kvHeads, past.cap, headDim]);
    allFetches.add(n.newKey).add(n.newValue);
  });
  const out = await run(allFeeds, [...allFetches]);
  kv.names.forEach((n, i) => {
    buffers.writeNew(kv.rows, kv.seq, i, tensorF32(out[n.newKey], n.newKey), tensorF32(out[n.newValue], n.newValue));
    delete out[n.newKey];
    delete out[n.newValue];
  });
  return out;
}
