// What each activation wire encoding costs on this CPU: encode + decode time of one step frame
// (tensor-frame.ts) per hidden-state element, and its bytes per element, for f32, f16 and int8,
// each with and without zstd. These are the per-element constants of the cost model in
// electron/engine/pipeline/link-wire.ts (ENCODING_COSTS), which picks an encoding per ring link.
// Hidden states are normal with a few large outliers, like a transformer's residual stream.
// Run: npx tsx bench/wire-encodings.ts   Prints a table and writes bench/results/wire-encodings.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { decodeStepFrame, encodeStepFrame, type ActivationEncoding } from '../electron/engine/transport/tensor-frame.js';

const SHAPES: Array<{ label: string; rows: number; seq: number; hidden: number }> = [
  { label: 'decode 1 x 2048', rows: 1, seq: 1, hidden: 2048 },
  { label: 'decode 8 x 2048', rows: 8, seq: 1, hidden: 2048 },
  { label: 'prefill 128 x 2048', rows: 1, seq: 128, hidden: 2048 },
];
const ENCODINGS: Array<{ encoding: ActivationEncoding; zstd: boolean }> = [
  { encoding: 'f32', zstd: false }, { encoding: 'f16', zstd: false }, { encoding: 'int8', zstd: false },
  { encoding: 'f32', zstd: true }, { encoding: 'f16', zstd: true }, { encoding: 'int8', zstd: true },
];
const BUDGET_MS = Number(process.env.KIWI_BENCH_MS ?? 400);

function hiddenStates(n: number): Float32Array {
  // mulberry32: a seeded generator whose sequence does not repeat within a frame (zstd would find repeats).
  let seed = 12345;
  const rand = (): number => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return new Float32Array(n).map((_, i) => {
    const g = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
    return i % 97 === 0 ? g * 20 : g;
  });
}

interface Row { shape: string; wire: string; elements: number; bytes: number; encodeUs: number; decodeUs: number; nsPerElement: number; bytesPerElement: number }
const rows: Row[] = [];
for (const shape of SHAPES) {
  const n = shape.rows * shape.seq * shape.hidden;
  const hidden = hiddenStates(n);
  const frame = { metadata: { step: '1', rows: '[{"id":1,"pos":0,"cap":256}]' }, tensor: { kind: 'hidden' as const, hidden, dims: [shape.rows, shape.seq, shape.hidden] as [number, number, number] } };
  for (const wire of ENCODINGS) {
    let bytes = await encodeStepFrame(frame, wire);
    for (let i = 0; i < 3; i++) await decodeStepFrame(await encodeStepFrame(frame, wire), { maxBytes: 1 << 28 });
    let iters = 0;
    let encodeMs = 0;
    let decodeMs = 0;
    while (encodeMs + decodeMs < BUDGET_MS) {
      const t0 = performance.now();
      bytes = await encodeStepFrame(frame, wire);
      const t1 = performance.now();
      await decodeStepFrame(bytes, { maxBytes: 1 << 28 });
      decodeMs += performance.now() - t1;
      encodeMs += t1 - t0;
      iters++;
    }
    rows.push({
      shape: shape.label, wire: `${wire.encoding}${wire.zstd ? '+zstd' : ''}`, elements: n, bytes: bytes.length,
      encodeUs: (encodeMs / iters) * 1000, decodeUs: (decodeMs / iters) * 1000,
      nsPerElement: ((encodeMs + decodeMs) / iters / n) * 1e6, bytesPerElement: bytes.length / n,
    });
  }
}

const load = loadavg().map((l) => l.toFixed(2)).join(' ');
console.log(`activation wire encodings, encode + decode in one thread (load average ${load})`);
console.log('shape                 wire          bytes   encode us   decode us   ns/elem   bytes/elem');
for (const r of rows) {
  console.log(`${r.shape.padEnd(21)} ${r.wire.padEnd(10)} ${String(r.bytes).padStart(8)} ${r.encodeUs.toFixed(1).padStart(11)} ${r.decodeUs.toFixed(1).padStart(11)} ${r.nsPerElement.toFixed(2).padStart(9)} ${r.bytesPerElement.toFixed(3).padStart(12)}`);
}
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'wire-encodings.json'), `${JSON.stringify({ date: new Date().toISOString(), loadavg: load, rows }, null, 1)}\n`);
