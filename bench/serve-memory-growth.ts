// Where a serving process's anonymous memory goes after load (issue 14): the host's RssAnon grew
// ~60 MiB over 48 distinct prompts in a ring, past what the plan admits. This bench runs `kiwi
// serve` on a `kiwi synth` model, sends distinct prompts of varied lengths (short answers), and
// samples RssAnon and VmHWM from /proc every few requests, side by side with the prompt cache on
// and off, so the growth can be told apart from the cache's own share.
// Run: npx tsx bench/serve-memory-growth.ts [--model FILE] [--prompts 48] [--rounds 2] [--cache-mb 0,64]
// Prints a table and writes bench/results/serve-memory-growth.json. Linux only (/proc).
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { kiwiEntry, ProcessSet, type Proc, repoRoot, waitEvent } from '../electron/engine/test-support/processes.js';

const { values: args } = parseArgs({
  options: { model: { type: 'string' }, prompts: { type: 'string', default: '48' }, rounds: { type: 'string', default: '2' }, 'cache-mb': { type: 'string', default: '0,64' } },
});
const PROMPTS = Number(args.prompts);
const ROUNDS = Number(args.rounds);
const CACHES = args['cache-mb'].split(',').map(Number);
const EVERY = 8;
// The model of ring.memory.process.test.ts: 8 blocks of a 1B's width, Q4_0.
const SHAPE = { name: 'mem8', architecture: 'llama', blockCount: 8, embeddingLength: 2048, headCount: 16, headCountKv: 4, feedForwardLength: 8192, vocabSize: 4096, contextLength: 512 };

async function memMiB(p: Proc): Promise<{ rssAnon: number; hwm: number }> {
  const s = await readFile(`/proc/${p.child.pid}/status`, 'utf8');
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)![1]);
  return { rssAnon: Math.round(kb('RssAnon') / 1024), hwm: Math.round(kb('VmHWM') / 1024) };
}

/** Prompt i: distinct words, 20 to 100 of them (about 80 to 400 tokens), so prefill shapes vary as a chat's do. */
const prompt = (i: number): string => `${i} ${Array.from({ length: 20 + (i % 5) * 20 }, (_, j) => `w${(i * 131 + j * 7) % 997}`).join(' ')}`;

async function run(procs: ProcessSet, model: string, cacheMb: number): Promise<Array<{ after: number; rssAnon: number; hwm: number }>> {
  const serve = procs.kiwi('serve', '--model', model, '--port', '0', '--parallel', '1', '--threads', '1', '--kv-cache-mb', '128', '--prompt-cache-mb', String(cacheMb), '--json');
  const url = (await waitEvent(serve, (e) => e.event === 'serving', 'the server', 180_000)).url as string;
  const complete = (text: string): Promise<Response> =>
    fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'mem8', prompt: text, max_tokens: 8, temperature: 0 }) });
  // `serving` comes before the model is loaded (503 until then): sample from a loaded, warmed-up process.
  for (let r = await complete('warm up'); !r.ok; r = await complete('warm up')) {
    if (r.status !== 503) throw new Error(`warm-up: HTTP ${r.status} ${await r.text()}`);
    await new Promise((res) => setTimeout(res, 250));
  }
  const samples = [{ after: 0, ...(await memMiB(serve)) }];
  for (let i = 0; i < PROMPTS; i++) {
    const r = await complete(prompt(i));
    if (!r.ok) throw new Error(`request ${i}: HTTP ${r.status} ${await r.text()}`);
    await r.json();
    if ((i + 1) % EVERY === 0 || i === 0) samples.push({ after: i + 1, ...(await memMiB(serve)) });
  }
  procs.killAll();
  return samples;
}

async function main(): Promise<void> {
  if (process.platform !== 'linux') throw new Error('bench/serve-memory-growth.ts reads /proc: Linux only');
  const procs = new ProcessSet();
  let model = args.model;
  // The synthesized model and the processes' shard cache live in a folder removed at the end.
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-serve-memory-'));
  process.env.KIWI_CACHE_DIR = join(dir, 'cache');
  if (model === undefined) {
    model = join(dir, 'mem8.gguf');
    await promisify(execFile)(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(SHAPE), '--quant', 'q4_0', '--out', model, '--seed', '3'], { cwd: repoRoot });
  }
  const rows: Array<{ cacheMb: number; round: number; samples: Awaited<ReturnType<typeof run>> }> = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const cacheMb of CACHES) {
      const samples = await run(procs, model, cacheMb);
      rows.push({ cacheMb, round, samples });
      const first = samples[1]!;
      const last = samples[samples.length - 1]!;
      const peak = Math.max(...samples.map((s) => s.rssAnon));
      console.log(`prompt cache ${String(cacheMb).padStart(3)} MiB, round ${round + 1}: RssAnon loaded ${samples[0]!.rssAnon}, after 1 prompt ${first.rssAnon} MiB, after ${last.after} ${last.rssAnon} MiB (+${last.rssAnon - first.rssAnon}), highest sample ${peak}, VmHWM ${last.hwm} | ${samples.map((s) => `${s.after}:${s.rssAnon}`).join(' ')}`);
    }
  }
  procs.dispose();
  await rm(dir, { recursive: true, force: true });
  await mkdir(join(repoRoot, 'bench/results'), { recursive: true });
  await writeFile(join(repoRoot, 'bench/results/serve-memory-growth.json'), `${JSON.stringify({ model, prompts: PROMPTS, rows }, null, 2)}\n`);
}

await main();
