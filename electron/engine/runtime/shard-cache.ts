// The shard cache on disk: a built stage graph (model.onnx) with its repacked weights
// (weights.bin, external data) under a key of model fingerprint, layer range, head, options
// and provider, so the second start of the same shard skips reading, repacking and encoding.
// Invariant: an entry directory appears only complete (written aside, then renamed).
import { createHash } from 'node:crypto';
import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { alignExternal, encodeModel } from '../ort/onnx-graph.js';
import type { GraphBuilder, GraphBuilderOptions } from '../ort/onnx-graph.js';

/** Bumped whenever the graph or weight layout changes, so old entries are not reused. */
const FORMAT_VERSION = 4; // 3: the head has the hidden_norm output (embeddings); 4: Q4_K as MatMulNBits + block offsets
const MODEL_FILE = 'model.onnx';
const WEIGHTS_FILE = 'weights.bin';
const MANIFEST_FILE = 'manifest.json';

export interface ShardKey {
  /** modelFingerprint() of the GGUF. */
  model: string;
  start: number;
  end: number;
  head: boolean;
  accuracyLevel: number;
  maxPositions: number;
  provider: string;
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

function keyDir(key: ShardKey): string {
  const text = JSON.stringify({ v: FORMAT_VERSION, ...key });
  return createHash('sha256').update(text).digest('hex').slice(0, 32);
}

interface Manifest {
  key: ShardKey;
  formatVersion: number;
  sourceMtimeMs: number;
  weightsBytes: number;
}

export class ShardCache {
  constructor(readonly dir: string) {}

  /** The model.onnx path of a complete entry for `key`, or undefined. */
  async lookup(key: ShardKey, sourcePath: string): Promise<string | undefined> {
    const entry = join(this.dir, keyDir(key));
    let manifest: Manifest;
    try {
      manifest = JSON.parse(await readFile(join(entry, MANIFEST_FILE), 'utf8')) as Manifest;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    const source = await stat(sourcePath);
    const weights = await stat(join(entry, WEIGHTS_FILE)).catch(() => undefined);
    if (manifest.formatVersion !== FORMAT_VERSION || manifest.sourceMtimeMs !== source.mtimeMs || weights?.size !== manifest.weightsBytes) {
      await rm(entry, { recursive: true, force: true });
      return undefined;
    }
    return join(entry, MODEL_FILE);
  }

  /** Writes the graph and its weights as an entry for `key`; returns its model.onnx path. */
  async store(key: ShardKey, sourcePath: string, graph: GraphBuilder): Promise<string> {
    return this.build(key, sourcePath, () => Promise.resolve(graph));
  }

  /**
   * Builds an entry for `key` by streaming: `make` gets a spill function for its GraphBuilder
   * (GraphBuilderOptions.spill), which writes each large initializer into the entry's weights file
   * as it is added, so no more than the initializers in flight are held in memory. Returns the
   * entry's model.onnx path.
   */
  async build(key: ShardKey, sourcePath: string, make: (spill: NonNullable<GraphBuilderOptions['spill']>) => Promise<GraphBuilder>): Promise<string> {
    await mkdir(this.dir, { recursive: true });
    const name = keyDir(key);
    const entry = join(this.dir, name);
    const tmp = join(this.dir, `${name}.tmp-${process.pid}-${Date.now()}`);
    await mkdir(tmp, { recursive: true });
    try {
      const fd = openSync(join(tmp, WEIGHTS_FILE), 'w');
      let encoded: ReturnType<typeof encodeModel>;
      try {
        let end = 0;
        const spill = (bytes: Uint8Array): { offset: number; length: number } => {
          const offset = alignExternal(end);
          for (let done = 0; done < bytes.byteLength; ) done += writeSync(fd, bytes, done, bytes.byteLength - done, offset + done);
          end = offset + bytes.byteLength;
          return { offset, length: bytes.byteLength };
        };
        const graph = await make(spill);
        encoded = encodeModel(graph, { externalDataFile: WEIGHTS_FILE });
        for (const { offset, bytes } of encoded.external) {
          for (let done = 0; done < bytes.byteLength; ) done += writeSync(fd, bytes, done, bytes.byteLength - done, offset + done);
        }
        ftruncateSync(fd, encoded.externalBytes);
      } finally {
        closeSync(fd);
      }
      await writeFile(join(tmp, MODEL_FILE), encoded.model);
      const manifest: Manifest = {
        key,
        formatVersion: FORMAT_VERSION,
        sourceMtimeMs: (await stat(sourcePath)).mtimeMs,
        weightsBytes: encoded.externalBytes,
      };
      await writeFile(join(tmp, MANIFEST_FILE), JSON.stringify(manifest, null, 1));
      await rm(entry, { recursive: true, force: true });
      try {
        await rename(tmp, entry);
      } catch (err) {
        // Another process stored the same shard meanwhile: use theirs.
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
        await rm(tmp, { recursive: true, force: true });
      }
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
    return join(entry, MODEL_FILE);
  }
}
