// The shard cache on disk: built stage graphs with their repacked weights, so the second start of
// a shard skips reading, repacking and encoding. Each layer's built weights are stored once, in a
// file of their own that every range's graph references (ONNX external data names its file per
// initializer): a graph for layers 9-21 built after one for 15-32 reuses layers 15-20 as they are.
//   <dir>/<model>/layer-<L>-<form>.bin|.json   the initializers of blk.L (all of them, any size)
//   <dir>/<model>/shared-<sha256>.bin          any other initializer (rope tables, head), by content:
//                                              ranges with the same rope tables or head share them
//   <dir>/<model>/range-<key>.onnx|.json       a range's graph
// Invariant: a file appears only complete (written aside, then renamed), and a layer or range is
// complete only once its manifest (.json, renamed last) is there. A manifest records its source's
// tag (default: the GGUF's mtime; a member's partial model: the sha256 of the layer's span), so a
// changed source rebuilds and a layer received again with the same bytes is still reused.
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { alignExternal, ELEM_BYTES, encodeModel, EXTERNAL_MIN_BYTES } from '../ort/onnx-graph.js';
import type { ElemType, ExternalRef, GraphBuilder, GraphBuilderOptions } from '../ort/onnx-graph.js';

/** Bumped whenever the graph or weight layout changes, so old entries are not reused. */
// 3: the head has the hidden_norm output (embeddings); 4: Q4_K as MatMulNBits + block offsets;
// 5: the head takes logits_from (speculative verification); 6: one file per layer, shared by ranges;
// 7: new_key/new_value outputs (the new positions) in place of the whole present K/V.
const FORMAT_VERSION = 7;
/**
 * What a layer file holds depends on the graph's precision and the weight layout only (accuracy
 * level is a node attribute): exact layers are 'fp32', the fast layout's 'fp32fast'.
 */
const layerForm = (key: Pick<ShardKey, 'layout'>): string => (key.layout === 'fast' ? 'fp32fast' : 'fp32');

export interface ShardKey {
  /** modelFingerprint() of the GGUF. */
  model: string;
  start: number;
  end: number;
  head: boolean;
  accuracyLevel: number;
  maxPositions: number;
  provider: string;
  /** The graph has the replay inputs (stage-graph.ts replayInputs); absent: it has not. */
  replay?: true;
  /** The fast weight layout (weights/convert.ts WeightLayout); absent: exact. */
  layout?: 'fast';
}

/**
 * Where a shard's weights come from. Tags identify the bytes: a layer file is reused when its tag
 * is the one asked for. Default for both: the file's mtime (an edited GGUF is rebuilt).
 */
export interface ShardSource {
  path: string;
  /** Tag of the range's own initializers (rope tables, head): the model-wide tensors' bytes. */
  tag?: string;
  /** Tag of layer L's bytes. */
  layerTag?: (L: number) => string;
  /** Whether layer L's GGUF bytes can be read (a member releases them once built); default yes. */
  rawLayer?: (L: number) => boolean;
}

/** What `build`'s maker gets: where initializers go, and which layers are already built. */
export interface ShardBuild {
  place: NonNullable<GraphBuilderOptions['place']>;
  /** Layer L's built file is usable: add it hollow (stage-weights.ts hollowLayer), its bytes are not read. */
  reused(L: number): boolean;
  /**
   * Resolves once the layers before the one being placed are on disk: a maker that awaits it after
   * each layer keeps about one layer's built bytes in flight however slow the disk (the writes run
   * while the next layer is converted).
   */
  flush(): Promise<void>;
}

/**
 * Identifies a GGUF by its header (metadata + tensor index: names, types, shapes, offsets) and
 * size, hashed with sha256. Cheap (no tensor data is read); the manifest also records the file's
 * mtime so an edited file is rebuilt.
 */
export async function modelFingerprint(file: GgufFile): Promise<string> {
  const fh = await open(file.path, 'r');
  try {
    const header = Buffer.allocUnsafe(file.dataOffset);
    const { bytesRead } = await fh.read(header, 0, header.length, 0);
    return createHash('sha256').update(header.subarray(0, bytesRead)).update(`:${file.fileSize}`).digest('hex');
  } finally {
    await fh.close();
  }
}

const shortHash = (value: unknown): string => createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 32);
const LAYER_NAME = /^blk\.(\d+)\./;

interface LayerManifest {
  formatVersion: number;
  layer: number;
  form: string;
  tag: string;
  bytes: number;
  initializers: Record<string, { type: ElemType; dims: number[]; offset: number; length: number }>;
}

interface RangeManifest {
  key: ShardKey;
  formatVersion: number;
  tag: string;
  /** Bytes of range-<key>.bin (initializers placed nowhere else; none today). */
  weightsBytes: number;
  shared: Array<{ file: string; bytes: number }>;
  layers: Array<{ layer: number; tag: string; bytes: number }>;
}

async function readJson<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || err instanceof SyntaxError) return undefined;
    throw err;
  }
}

const sizeOf = async (path: string): Promise<number | undefined> => (await stat(path).catch(() => undefined))?.size;

/** Writes `bytes` at `offset` through `fh`, all of them. */
async function writeAt(fh: FileHandle, bytes: Uint8Array, offset: number): Promise<void> {
  for (let done = 0; done < bytes.byteLength; ) done += (await fh.write(bytes, done, bytes.byteLength - done, offset + done)).bytesWritten;
}

/**
 * One external-data file being written aside (`tmp`), renamed to `final` when complete. Writes
 * are queued in order and run on libuv's threads, so the next layer is converted while this one
 * is written; `done()` resolves once everything queued (and the close) is on disk, or rejects
 * with the first failure.
 */
class ExternalFile {
  private fh: Promise<FileHandle> | undefined;
  private queue: Promise<void> = Promise.resolve();
  private closed = false;
  end = 0;

  constructor(readonly tmp: string, readonly name: string) {}

  private then(step: (fh: FileHandle) => Promise<void>): void {
    if (this.fh === undefined) {
      this.fh = open(this.tmp, 'w');
      this.fh.catch(() => undefined); // a failed open is reported by the step that awaits it (done())
    }
    const fh = this.fh;
    this.queue = this.queue.then(async () => step(await fh));
    this.queue.catch(() => undefined); // reported by done()
  }

  append(bytes: Uint8Array): { offset: number; length: number } {
    if (this.closed) throw new Error(`${this.name}: written after it was complete (layers out of order)`);
    const offset = alignExternal(this.end);
    this.then((fh) => writeAt(fh, bytes, offset));
    this.end = offset + bytes.byteLength;
    return { offset, length: bytes.byteLength };
  }

  writeAt(bytes: Uint8Array, offset: number): void {
    this.then((fh) => writeAt(fh, bytes, offset));
  }

  /** Closes the file (created empty when nothing was written), `size` long, once the writes queued are done. */
  close(size = this.end): void {
    if (this.closed) return;
    this.closed = true;
    this.then(async (fh) => {
      await fh.truncate(size);
      await fh.close();
    });
  }

  get complete(): boolean {
    return this.closed;
  }

  done(): Promise<void> {
    return this.queue;
  }

  async abandon(): Promise<void> {
    await this.queue.catch(() => undefined);
    await (await this.fh?.catch(() => undefined))?.close().catch(() => undefined);
  }
}

export class ShardCache {
  constructor(readonly dir: string) {}

  private modelDir(model: string): string {
    return join(this.dir, shortHash({ v: FORMAT_VERSION, model }));
  }

  private static layerName(L: number, form: string): string {
    return `layer-${L}-${form}`;
  }

  private static rangeName(key: ShardKey): string {
    return `range-${shortHash({ v: FORMAT_VERSION, ...key })}`;
  }

  /** Layer L's manifest when its file is complete and was built from bytes tagged `tag`. */
  private async layer(dir: string, L: number, tag: string, form: string): Promise<LayerManifest | undefined> {
    const name = ShardCache.layerName(L, form);
    const m = await readJson<LayerManifest>(join(dir, `${name}.json`));
    if (m?.formatVersion !== FORMAT_VERSION || m.layer !== L || m.form !== form || m.tag !== tag) return undefined;
    return (await sizeOf(join(dir, `${name}.bin`))) === m.bytes ? m : undefined;
  }

  /** The layers of `model` built here in the exact layout, each with its tag (a member counts them as held: it need not receive them again). */
  async builtLayers(model: string): Promise<Map<number, string>> {
    const form = layerForm({});
    const dir = this.modelDir(model);
    const names = await readdir(dir).catch(() => [] as string[]);
    const layers = new Map<number, string>();
    for (const n of names) {
      const m = /^layer-(\d+)-(\w+)\.json$/.exec(n);
      if (m === null || m[2] !== form) continue;
      const manifest = await readJson<LayerManifest>(join(dir, n));
      if (manifest !== undefined && (await this.layer(dir, Number(m[1]), manifest.tag, form)) !== undefined) layers.set(Number(m[1]), manifest.tag);
    }
    return layers;
  }

  /** The tags of the layers of `model` built here in the exact layout. */
  async builtLayerTags(model: string): Promise<Set<string>> {
    return new Set((await this.builtLayers(model)).values());
  }

  /** The model .onnx path of a complete entry for `key` whose range and layers match `source`'s tags, or undefined. */
  async lookup(key: ShardKey, source: string | ShardSource): Promise<string | undefined> {
    const src = await resolveSource(source);
    const dir = this.modelDir(key.model);
    const name = ShardCache.rangeName(key);
    const manifest = await readJson<RangeManifest>(join(dir, `${name}.json`));
    if (manifest === undefined) return undefined;
    let valid = manifest.formatVersion === FORMAT_VERSION && manifest.tag === src.tag && (manifest.weightsBytes === 0 || (await sizeOf(join(dir, `${name}.bin`))) === manifest.weightsBytes);
    for (const f of manifest.shared) if (valid) valid = (await sizeOf(join(dir, f.file))) === f.bytes;
    for (const l of manifest.layers) {
      if (!valid) break;
      valid = l.tag === src.layerTag(l.layer) && (await this.layer(dir, l.layer, l.tag, layerForm(key)))?.bytes === l.bytes;
    }
    if (!valid) {
      // Only the range's own files go: its layers are checked (and kept or rebuilt) on their own.
      await Promise.all(['json', 'onnx', 'bin'].map((ext) => rm(join(dir, `${name}.${ext}`), { force: true })));
      return undefined;
    }
    return join(dir, `${name}.onnx`);
  }

  /** Writes a graph built in memory as an entry for `key`; returns its model path. */
  async store(key: ShardKey, source: string | ShardSource, graph: GraphBuilder): Promise<string> {
    return this.build(key, source, () => Promise.resolve(graph));
  }

  /**
   * Builds an entry for `key` by streaming: `make` builds its GraphBuilder with `place`
   * (GraphBuilderOptions.place), which writes each initializer to its layer's file (or the range's)
   * as it is added, so no more than the initializers in flight are held in memory; for a layer
   * already built (`reused`) it adds the layer hollow and place points at the existing file.
   * Returns the entry's model path.
   */
  async build(key: ShardKey, source: string | ShardSource, make: (b: ShardBuild) => Promise<GraphBuilder>): Promise<string> {
    const src = await resolveSource(source);
    const dir = this.modelDir(key.model);
    await mkdir(dir, { recursive: true });
    await this.dropOldEntries();
    const suffix = `.tmp-${process.pid}-${Date.now()}`;
    const reused = new Map<number, LayerManifest>();
    const form = layerForm(key);
    for (let L = key.start; L < key.end; L++) {
      const m = await this.layer(dir, L, src.layerTag(L), form);
      if (m !== undefined) reused.set(L, m);
      else if (!src.rawLayer(L)) {
        throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `Layer ${L} is neither built in the shard cache nor received: its weights must be received again.`, { layer: L });
      }
    }
    const name = ShardCache.rangeName(key);
    const range = new ExternalFile(join(dir, `${name}.bin${suffix}`), `${name}.bin`);
    const layers = new Map<number, { file: ExternalFile; manifest: LayerManifest }>();
    // What to remove should the build fail: the range's files, then each file begun.
    const tmps = [range.tmp, ...['onnx', 'json'].map((ext) => join(dir, `${name}.${ext}${suffix}`))];
    const shared = new Map<string, number>();
    const sharing = new Map<string, Promise<void>>();
    // Content-addressed: the file's name is its bytes' sha256, so an existing one of that size is these bytes.
    const shareFile = (bytes: Uint8Array): ExternalRef => {
      const file = `shared-${createHash('sha256').update(bytes).digest('hex').slice(0, 40)}.bin`;
      const path = join(dir, file);
      if (statSync(path, { throwIfNoEntry: false })?.size !== bytes.byteLength && !sharing.has(file)) {
        // Written on libuv's threads while the build goes on (the head is hundreds of MB); the build awaits it.
        tmps.push(`${path}${suffix}`);
        const written = writeFile(`${path}${suffix}`, bytes).then(() => rename(`${path}${suffix}`, path));
        written.catch(() => undefined); // awaited below
        sharing.set(file, written);
      }
      shared.set(file, bytes.byteLength);
      return { location: file, offset: 0, length: bytes.byteLength };
    };
    const place = (initName: string, type: ElemType, dims: number[], bytes: Uint8Array): ExternalRef | undefined => {
      // Shapes and axes (int64) stay in the graph: onnxruntime's shape inference reads them there, and they come from the shape, not the weights.
      if (type === 'int64') return undefined;
      const m = LAYER_NAME.exec(initName);
      const expected = dims.reduce((a, b) => a * b, 1) * ELEM_BYTES[type];
      const L = m === null ? undefined : Number(m[1]);
      const built = L === undefined ? undefined : reused.get(L);
      if (built !== undefined) {
        const at = built.initializers[initName];
        if (at?.type !== type || at.length !== expected || at.dims.join() !== dims.join()) {
          throw new KiwiError('MODEL_UNSUPPORTED', `The built layer ${L!} has no initializer ${initName} of [${dims.join(', ')}] ${type}; delete the shard cache to rebuild it.`);
        }
        return { location: `${ShardCache.layerName(L!, form)}.bin`, offset: at.offset, length: at.length };
      }
      if (bytes.byteLength !== expected) throw new Error(`initializer ${initName}: ${bytes.byteLength} bytes for dims [${dims.join(', ')}] ${type} (expected ${expected})`);
      if (L === undefined) return bytes.byteLength >= EXTERNAL_MIN_BYTES ? shareFile(bytes) : undefined;
      let layer = layers.get(L);
      if (layer === undefined) {
        const file = new ExternalFile(join(dir, `${ShardCache.layerName(L, form)}.bin${suffix}`), `${ShardCache.layerName(L, form)}.bin`);
        tmps.push(file.tmp, `${file.tmp}.json`);
        layer = { file, manifest: { formatVersion: FORMAT_VERSION, layer: L, form, tag: src.layerTag(L), bytes: 0, initializers: {} } };
        // Layers come one after another: the previous one's file is complete.
        for (const other of layers.values()) other.file.close();
        layers.set(L, layer);
      }
      const at = layer.file.append(bytes);
      layer.manifest.initializers[initName] = { type, dims, ...at };
      layer.manifest.bytes = layer.file.end;
      return { location: layer.file.name, ...at };
    };
    try {
      const flush = async (): Promise<void> => {
        await Promise.all([...layers.values()].filter((l) => l.file.complete).map((l) => l.file.done()));
      };
      const graph = await make({ place, reused: (L) => reused.has(L), flush });
      // A graph built in memory (store): its initializers go where a streamed build puts them.
      for (const init of graph.initializers) {
        if (init.spilled !== undefined) continue;
        const placed = place(init.name, init.type, init.dims, init.bytes);
        if (placed !== undefined) Object.assign(init, { bytes: new Uint8Array(0), spilled: placed });
      }
      const encoded = encodeModel(graph, { externalDataFile: range.name });
      for (const { offset, bytes } of encoded.external) range.writeAt(bytes, offset);
      range.close(encoded.externalBytes);
      await range.done();
      await Promise.all(sharing.values());
      if (encoded.externalBytes === 0) await rm(range.tmp, { force: true });
      for (const { file, manifest } of layers.values()) {
        file.close();
        await file.done();
        await writeFile(`${file.tmp}.json`, JSON.stringify(manifest));
      }
      const manifest: RangeManifest = {
        key,
        formatVersion: FORMAT_VERSION,
        tag: src.tag,
        weightsBytes: encoded.externalBytes,
        shared: [...shared].map(([file, bytes]) => ({ file, bytes })),
        layers: Array.from({ length: key.end - key.start }, (_, i) => key.start + i).map((L) => ({
          layer: L,
          tag: src.layerTag(L),
          bytes: (reused.get(L) ?? layers.get(L)?.manifest)?.bytes ?? 0,
        })),
      };
      await writeFile(tmps[1]!, encoded.model);
      await writeFile(tmps[2]!, JSON.stringify(manifest, null, 1));
      // Layers first (each bin, then its manifest), then the range (its manifest last). Another
      // process that built the same files meanwhile wrote the same bytes: renaming over them is safe.
      for (const [L, { file }] of layers) {
        await rename(file.tmp, join(dir, file.name));
        await rename(`${file.tmp}.json`, join(dir, `${ShardCache.layerName(L, form)}.json`));
      }
      if (encoded.externalBytes > 0) await rename(range.tmp, join(dir, range.name));
      await rename(tmps[1]!, join(dir, `${name}.onnx`));
      await rename(tmps[2]!, join(dir, `${name}.json`));
    } catch (err) {
      await Promise.all([range, ...[...layers.values()].map((l) => l.file)].map((f) => f.abandon()));
      await Promise.allSettled(sharing.values());
      await Promise.all(tmps.map((p) => rm(p, { force: true })));
      throw err;
    }
    return join(dir, `${name}.onnx`);
  }

  /** Entries of earlier formats (a directory per range with model.onnx + weights.bin) hold a copy of every layer: they go. */
  private async dropOldEntries(): Promise<void> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    await Promise.all(names.map(async (n) => {
      if ((await sizeOf(join(this.dir, n, 'manifest.json'))) !== undefined) await rm(join(this.dir, n), { recursive: true, force: true });
    }));
  }

  /** Bytes the cache's files take on disk (allocated blocks), for measurements and tests. */
  async diskBytes(): Promise<number> {
    return diskBytesOf(this.dir);
  }
}

/** Allocated bytes of the files under `dir` (st_blocks * 512: holes in sparse files take none). */
export async function diskBytesOf(dir: string): Promise<number> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  let sum = 0;
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) sum += await diskBytesOf(p);
    else if (e.isFile()) sum += (await stat(p)).blocks * 512;
  }
  return sum;
}

async function resolveSource(source: string | ShardSource): Promise<{ tag: string; layerTag: (L: number) => string; rawLayer: (L: number) => boolean }> {
  const s = typeof source === 'string' ? { path: source } : source;
  const mtime = `mtime:${(await stat(s.path)).mtimeMs}`;
  return { tag: s.tag ?? mtime, layerTag: s.layerTag ?? (() => mtime), rawLayer: s.rawLayer ?? (() => true) };
}
