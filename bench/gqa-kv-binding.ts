// What a decode step's KV cache costs at the onnxruntime-node boundary, per layer of
// Llama-3.2-1B shape (32 heads, 8 KV heads, head 64), cache capacity 4096, by filled positions:
//   bound:    present K/V are graph outputs fetched into the past tensors (GQA's shared buffer,
//             stage.ts's earlier layout): onnxruntime-node also copies every fetched output into a
//             new JS buffer, so each step copied the whole reserved capacity.
//   new-rows: present K/V stay inside the graph; past is the whole buffer as an input (inputs are
//             not copied) and only the added position comes back (GatherElements), what stage.ts
//             does now (stage-graph.ts IO.newKey): GQA copies the filled past into its present.
// Prints wall time per run from JS and the time onnxruntime reports inside the run (profiler).
// Run: npx tsx bench/gqa-kv-binding.ts   Env: KIWI_BENCH_PAST (filled positions, default 128,1024,4000).
// Writes bench/results/gqa-kv-binding.json.
import * as ort from 'onnxruntime-node';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GraphBuilder, MS_DOMAIN, encodeModel, f32Bytes } from '../electron/engine/ort/onnx-graph.js';

const CAP = 4096;
const PASTS = (process.env.KIWI_BENCH_PAST ?? '128,1024,4000').split(',').map(Number);
const RUNS = 40;
const MAX_POS = 8192;

function graph(presentAsOutputs: boolean): Uint8Array {
  const g = new GraphBuilder('gqa');
  const q = g.input('q', 'float32', [1, 1, 2048]);
  const k = g.input('k', 'float32', [1, 1, 512]);
  const v = g.input('v', 'float32', [1, 1, 512]);
  const pk = g.input('past_key', 'float32', [1, 8, 'cap', 64]);
  const pv = g.input('past_value', 'float32', [1, 8, 'cap', 64]);
  const sk = g.input('seqlens_k', 'int32', [1]);
  const tl = g.input('total_sequence_length', 'int32', []);
  const cos = g.initializer('cos', 'float32', [MAX_POS, 32], f32Bytes(new Float32Array(MAX_POS * 32).fill(1)));
  const sin = g.initializer('sin', 'float32', [MAX_POS, 32], f32Bytes(new Float32Array(MAX_POS * 32)));
  g.node('GroupQueryAttention', [q, k, v, pk, pv, sk, tl, cos, sin], {
    domain: MS_DOMAIN,
    attrs: { num_heads: 32, kv_num_heads: 8, do_rotary: 1, rotary_interleaved: 1, scale: { float: 0.125 } },
    outputs: ['attn', 'present_key', 'present_value'],
  });
  g.output('attn', 'float32', [1, 1, 2048]);
  if (presentAsOutputs) {
    g.output('present_key', 'float32', [1, 8, 'cap', 64]);
    g.output('present_value', 'float32', [1, 8, 'cap', 64]);
  } else {
    // The added position (at seqlens_k) of each of the 8 KV heads, as stage-graph.ts gathers it.
    const at = g.op('Expand', [g.op('Reshape', [g.op('Cast', [sk], { attrs: { to: 7 } }), g.int64s('at_shape', [1, 1, 1, 1])]), g.int64s('at_dims', [1, 8, 1, 64])]);
    for (const name of ['key', 'value']) {
      g.op('GatherElements', [`present_${name}`, at], { attrs: { axis: 2 }, output: `new_${name}` });
      g.output(`new_${name}`, 'float32', [1, 8, 1, 64]);
    }
  }
  return encodeModel(g).model;
}

const dir = join(os.tmpdir(), `kiwi-gqa-bench-${process.pid}`);
await mkdir(dir, { recursive: true });
const rows: Array<Record<string, number | string>> = [];
try {
  for (const mode of ['bound', 'new-rows'] as const) {
    const session = await ort.InferenceSession.create(graph(mode === 'bound'), {
      intraOpNumThreads: 2,
      logSeverityLevel: 3,
      enableProfiling: true,
      profileFilePrefix: join(dir, mode),
    });
    const f = (n: number) => new ort.Tensor('float32', new Float32Array(n).fill(0.01), [1, 1, n]);
    for (const past of PASTS) {
      const K = new ort.Tensor('float32', new Float32Array(8 * CAP * 64).fill(0.01), [1, 8, CAP, 64]);
      const V = new ort.Tensor('float32', new Float32Array(8 * CAP * 64).fill(0.01), [1, 8, CAP, 64]);
      const wall: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const feeds = {
          q: f(2048), k: f(512), v: f(512), past_key: K, past_value: V,
          seqlens_k: new ort.Tensor('int32', Int32Array.of(past), [1]),
          total_sequence_length: new ort.Tensor('int32', Int32Array.of(past + 1), []),
        };
        const t = performance.now();
        if (mode === 'bound') await session.run(feeds, { attn: null, present_key: K, present_value: V });
        else await session.run(feeds);
        wall.push(performance.now() - t);
      }
      rows.push({ mode, past, wall: wall.sort((a, b) => a - b)[RUNS >> 1]! });
    }
    session.endProfiling();
    await session.release();
    const file = (await readdir(dir)).find((n) => n.startsWith(mode))!;
    const runs = (JSON.parse(await readFile(join(dir, file), 'utf8')) as Array<{ name: string; dur: number }>)
      .filter((e) => e.name === 'model_run')
      .map((e) => e.dur / 1000);
    // The profile holds RUNS runs per filled length, in order.
    PASTS.forEach((_, i) => {
      const r = rows[rows.length - PASTS.length + i]!;
      r.inside = runs.slice(i * RUNS, (i + 1) * RUNS).sort((a, b) => a - b)[RUNS >> 1]!;
    });
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
console.log('mode\tfilled\twall_ms(median)\tinside_ort_ms(median)');
for (const r of rows) console.log(`${r.mode}\t${r.past}\t${(r.wall as number).toFixed(3)}\t${(r.inside as number).toFixed(3)}`);
const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'gqa-kv-binding.json'), `${JSON.stringify({ date: new Date().toISOString(), loadavg: os.loadavg(), capacity: CAP, rows }, null, 1)}\n`);
