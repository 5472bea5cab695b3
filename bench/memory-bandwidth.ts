// Kiwi's host memory bandwidth figure against standard tools on the same machine, run alternately
// so that a noisy neighbour hits both alike: sysbench's multi-threaded sequential read (the same
// quantity: read bandwidth with every core) must be within 25% of Kiwi's native probe (median of
// the per-round ratios). mbw's
// single-threaded memcpy, Kiwi's JS fallback and the execution-provider probe (run on the CPU
// provider here) are shown for context.
// Needs the Debian packages sysbench and mbw (apt-get install -y sysbench mbw).
// Run: npx tsx bench/memory-bandwidth.ts
// Prints a table and writes bench/results/memory-bandwidth.json; exits non-zero outside 25%.
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { defaultBandwidthShape, measureHostBandwidth } from '../electron/engine/device/memory-bandwidth.js';
import { measureProviderBandwidth } from '../electron/engine/device/provider-bandwidth.js';

const run = promisify(execFile);
const TOLERANCE = 0.25;
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 9);
const PASSES = 2;

const { threads, bytesPerThread } = defaultBandwidthShape();

async function sysbenchReadGBps(): Promise<number> {
  const total = bytesPerThread * threads * PASSES;
  const { stdout } = await run(
    'sysbench',
    [
      'memory',
      '--memory-oper=read',
      '--memory-access-mode=seq',
      `--memory-block-size=${bytesPerThread / 1024}K`,
      `--memory-total-size=${total / 1024}K`,
      `--threads=${threads}`,
      'run',
    ],
    { timeout: 120_000 },
  );
  const m = /\(([\d.]+) MiB\/sec\)/.exec(stdout);
  if (m === null) throw new Error(`could not read sysbench's output:\n${stdout}`);
  return (Number(m[1]) * 2 ** 20) / 1e9;
}

async function mbwCopyGBps(): Promise<number> {
  const mib = Math.max(64, Math.round(bytesPerThread / 2 ** 20));
  const { stdout } = await run('mbw', ['-q', '-n', '3', '-t0', String(mib)], { timeout: 120_000 });
  const m = /AVG\s+Method: MEMCPY.*Copy: ([\d.]+) MiB\/s/.exec(stdout);
  if (m === null) throw new Error(`could not read mbw's output:\n${stdout}`);
  return (Number(m[1]) * 2 ** 20) / 1e9;
}

async function have(tool: string): Promise<boolean> {
  try {
    await run('sh', ['-c', `command -v ${tool}`]);
    return true;
  } catch {
    // `command -v` exits non-zero exactly when the tool is absent: that is the answer.
    return false;
  }
}

if (!(await have('sysbench'))) {
  console.error('sysbench is not installed: apt-get install -y sysbench mbw');
  process.exit(2);
}
const withMbw = await have('mbw');

const samples = {
  kiwi_native: [] as number[],
  kiwi_js: [] as number[],
  kiwi_onnxruntime_cpu: [] as number[],
  sysbench_read: [] as number[],
  mbw_memcpy_1_thread: [] as number[],
};
let nativeMethod = '';
const kiwiNative = async (): Promise<void> => {
  const native = await measureHostBandwidth({ method: 'native', threads, bytesPerThread, rounds: 1, passesPerRound: PASSES });
  nativeMethod = native.method;
  samples.kiwi_native.push(native.gbps);
};
const sysbench = async (): Promise<void> => {
  samples.sysbench_read.push(await sysbenchReadGBps());
};
for (let r = 0; r < ROUNDS; r++) {
  process.stderr.write(`round ${r + 1}/${ROUNDS}\n`);
  // Kiwi and sysbench back to back, in alternating order (ABBA) so that drift in the machine's
  // load does not favour either; the context rows follow.
  if (r % 2 === 0) {
    await kiwiNative();
    await sysbench();
  } else {
    await sysbench();
    await kiwiNative();
  }
  samples.kiwi_js.push((await measureHostBandwidth({ method: 'js', threads, bytesPerThread, rounds: 1, passesPerRound: PASSES })).gbps);
  samples.kiwi_onnxruntime_cpu.push((await measureProviderBandwidth('cpu', { bytes: 256 * 2 ** 20, reads: 2, runs: 1 })).gbps);
  if (withMbw) samples.mbw_memcpy_1_thread.push(await mbwCopyGBps());
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};
const kiwi = median(samples.kiwi_native);
const reference = median(samples.sysbench_read);
// Each round ran Kiwi and sysbench back to back, so a busy neighbour slows both alike: the median
// of the per-round ratios is the comparison least disturbed by a shared machine.
const deviation = median(samples.kiwi_native.map((k, i) => k / (samples.sysbench_read[i] as number))) - 1;
const bestDeviation = Math.max(...samples.kiwi_native) / Math.max(...samples.sysbench_read) - 1;
const within = Math.abs(deviation) <= TOLERANCE;

const rows: Array<[string, string, number, number[]]> = [
  ['kiwi native read', `${threads} threads, ${bytesPerThread / 2 ** 20} MiB each`, kiwi, samples.kiwi_native],
  ['sysbench memory read', `${threads} threads, seq`, reference, samples.sysbench_read],
  ['kiwi JS fallback (copy)', `${threads} workers, bytes read`, median(samples.kiwi_js), samples.kiwi_js],
  ['kiwi via onnxruntime CPU EP', 'ReduceSum over 256 MiB', median(samples.kiwi_onnxruntime_cpu), samples.kiwi_onnxruntime_cpu],
];
if (withMbw) rows.push(['mbw memcpy', '1 thread, copied bytes', median(samples.mbw_memcpy_1_thread), samples.mbw_memcpy_1_thread]);
const w0 = Math.max(...rows.map((r) => r[0].length));
const w1 = Math.max(...rows.map((r) => r[1].length));
console.log(`${'method'.padEnd(w0)}  ${'setup'.padEnd(w1)}  median GB/s  samples`);
for (const [name, setup, med, xs] of rows) console.log(`${name.padEnd(w0)}  ${setup.padEnd(w1)}  ${med.toFixed(2).padStart(11)}  ${xs.map((x) => x.toFixed(2)).join(' ')}`);
console.log(
  `\nkiwi vs sysbench, median of per-round ratios: ${(deviation * 100).toFixed(1)}% (${within ? 'within' : 'OUTSIDE'} ±${TOLERANCE * 100}%); ` +
    `best vs best: ${(bestDeviation * 100).toFixed(1)}%`,
);

await mkdir(join('bench', 'results'), { recursive: true });
await writeFile(
  join('bench', 'results', 'memory-bandwidth.json'),
  `${JSON.stringify(
    {
      generated_at: new Date().toISOString(),
      threads,
      bytes_per_thread: bytesPerThread,
      rounds: ROUNDS,
      method: nativeMethod,
      median_gbps: Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, xs.length > 0 ? Number(median(xs).toFixed(3)) : null])),
      samples_gbps: samples,
      kiwi_vs_sysbench: Number(deviation.toFixed(4)),
      kiwi_vs_sysbench_best: Number(bestDeviation.toFixed(4)),
      tolerance: TOLERANCE,
      within,
    },
    null,
    2,
  )}\n`,
);
console.log('wrote bench/results/memory-bandwidth.json');
if (!within) process.exitCode = 1;
