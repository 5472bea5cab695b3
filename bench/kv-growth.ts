// Decode speed of one Llama-3.2-1B-shape stage (synth Q4_0 GGUF) with a request-sized KV
// reservation, buffers grown on use (stage.ts) vs buffers allocated at the full reservation
// (the earlier layout), rounds alternating. While stages fetched the whole present K/V,
// onnxruntime-node's copy of every fetched output made the full layout pay for the whole
// reservation on every step; a stage now fetches only the new positions (stage-graph.ts
// IO.newKey), and the two should decode alike (growth then only bounds memory).
// Run: npx tsx bench/kv-growth.ts   Env: KIWI_KV_RESERVE (default 2048), KIWI_KV_ROUNDS (default 4),
// KIWI_PROF_DIR (model and shard cache, kept between runs). Writes bench/results/kv-growth.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { synthesizeModel, SYNTH_QUANTS } from '../electron/engine/model/synth/synth.js';
import { resolveShape } from '../electron/engine/model/synth/shapes.js';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { ShardCache } from '../electron/engine/runtime/shard-cache.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import { freeCache, type KvCache } from '../electron/engine/runtime/kv-store.js';

const RESERVE = Number(process.env.KIWI_KV_RESERVE ?? 2048);
const ROUNDS = Number(process.env.KIWI_KV_ROUNDS ?? 4);
const PROMPT = 128;
const DECODE = 16;
const dir = process.env.KIWI_PROF_DIR ?? join(os.tmpdir(), 'kiwi-prof');
await mkdir(dir, { recursive: true });
const modelPath = join(dir, 'llama-3.2-1b-q4_0.gguf');
if (!existsSync(modelPath)) await synthesizeModel({ shape: resolveShape('llama-3.2-1b'), quant: SYNTH_QUANTS.q4_0!, out: modelPath, seed: 1 });
const file = await openGguf(modelPath);
const shape = await modelShapeFromGguf(file, { maxPositions: RESERVE });
const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { cache: new ShardCache(join(dir, 'shards-q4_0')), threads: 2, accuracyLevel: 4 });

function fullCache(): KvCache {
  return stage.emptyCache(RESERVE, RESERVE);
}

/** Decode tokens/s after a PROMPT-token prefill. */
async function decodeTokPerS(cache: KvCache): Promise<number> {
  const ids = (xs: number[]) => ({ kind: 'ids' as const, ids: BigInt64Array.from(xs.map(BigInt)), batch: 1, seq: xs.length });
  await stage.forward(ids(Array.from({ length: PROMPT }, (_, i) => 1000 + i)), [cache]);
  const t0 = performance.now();
  for (let i = 0; i < DECODE; i++) await stage.forward(ids([2000 + i]), [cache]);
  return (DECODE * 1000) / (performance.now() - t0);
}

const results = { grown: [] as number[], full: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? (['grown', 'full'] as const) : (['full', 'grown'] as const);
  for (const kind of order) {
    const cache = kind === 'grown' ? stage.emptyCache(RESERVE) : fullCache();
    results[kind].push(await decodeTokPerS(cache));
    freeCache(cache);
  }
}
await stage.dispose();
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
console.log(`reserve ${RESERVE} positions, prompt ${PROMPT}, ${ROUNDS} alternating rounds, load ${os.loadavg()[0]!.toFixed(2)}`);
console.log('kv buffers\tdecode_tok_s(median)\trounds');
for (const [k, v] of Object.entries(results)) console.log(`${k}\t${median(v).toFixed(2)}\t${v.map((x) => x.toFixed(2)).join(' ')}`);
const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'kv-growth.json'), `${JSON.stringify({ date: new Date().toISOString(), loadavg: os.loadavg(), reserve: RESERVE, prompt: PROMPT, decode: DECODE, results }, null, 1)}\n`);
