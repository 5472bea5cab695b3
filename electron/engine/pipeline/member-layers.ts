// A member's layers in their two forms: the GGUF spans it received (member-weights.ts) and the
// layer files the shard cache built from them (runtime/shard-cache.ts). A layer is stored once: its
// raw span is released (the file's bytes there become a hole) as soon as its built file is
// complete, and a layer counts as held when either form is there. The built form is tagged with
// the layer's spans' sha256, so it matches the host's plan whatever range it was built for.
// Rule: a layer the plan needs is received again only when neither its verified span nor a built
// file of the same bytes is on disk (a built file serves any range, head, accuracy level and
// provider: layer files depend on the layer's bytes and the graph's precision only).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ShardSource } from '../runtime/shard-cache.js';
import type { HashedSpan, Span } from './member-weights.js';

/** What a span's bytes are, as the shard cache's layer tags name them. */
export const spanTag = (s: HashedSpan): string => `span:${s.offset}+${s.bytes}:${s.sha256}`;

/** The plan's spans by the layer whose tensors they hold (stageSpans never crosses a layer), and the model-wide rest. */
export function layerSpans(file: GgufFile, spans: readonly HashedSpan[]): { layers: Map<number, HashedSpan[]>; rest: HashedSpan[] } {
  const layerAt = new Map<number, number>();
  for (const t of file.tensors) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m !== null && t.path === undefined) layerAt.set(t.offset, Number(m[1]));
  }
  const layers = new Map<number, HashedSpan[]>();
  const rest: HashedSpan[] = [];
  for (const s of spans) {
    const L = s.bytes > 0 ? layerAt.get(s.offset) : undefined;
    if (L === undefined) rest.push(s);
    else layers.set(L, [...(layers.get(L) ?? []), s]);
  }
  return { layers, rest };
}

/** The tag of a layer made of `spans` (as the shard cache records its built file). */
export const tagOf = (spans: readonly HashedSpan[]): string => [...spans].sort((a, b) => a.offset - b.offset).map(spanTag).join('|');

/** Layer L's tag: its spans' tags (what the shard cache records for its built file). */
export function layerTags(file: GgufFile, spans: readonly HashedSpan[]): Map<number, string> {
  return new Map([...layerSpans(file, spans).layers].map(([L, s]) => [L, tagOf(s)]));
}

/**
 * How the shard cache identifies a partial model's bytes: per layer by its spans' sha256, the
 * range by the model-wide spans'; `holdsRaw` says which spans are still on disk as received.
 */
export function partialCacheSource(file: GgufFile, spans: readonly HashedSpan[], holdsRaw: (s: HashedSpan) => boolean): Omit<ShardSource, 'path'> {
  const { layers, rest } = layerSpans(file, spans);
  return {
    tag: createHash('sha256').update(tagOf(rest)).digest('hex'),
    layerTag: (L) => tagOf(layers.get(L) ?? []),
    rawLayer: (L) => (layers.get(L) ?? []).every(holdsRaw),
  };
}

/** The spans of the plan whose layer is built (its tag in `built`): the member need not receive them. */
export function builtSpans(file: GgufFile, spans: readonly HashedSpan[], built: ReadonlySet<string>): HashedSpan[] {
  return [...layerSpans(file, spans).layers.values()].filter((s) => built.has(tagOf(s))).flat();
}

/**
 * Frees the disk blocks of `span` in `path` (the file keeps its size; the bytes read as zeros):
 * fallocate's punch-hole on Linux. Resolves false where that is not available (another system, a
 * file system without holes): the raw copy then stays, as before.
 */
export function punchHole(path: string, span: Span): Promise<boolean> {
  if (process.platform !== 'linux' || span.bytes === 0) return Promise.resolve(false);
  return new Promise((resolve) => {
    execFile('fallocate', ['--punch-hole', '--keep-size', '--offset', String(span.offset), '--length', String(span.bytes), path], (err) => resolve(err === null));
  });
}
