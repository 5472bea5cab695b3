// How fast a member receives its weights from the host (real processes on loopback): a synthetic
// f32 model of about 100 MB, a host that holds almost nothing, one member that receives nearly all
// layers over the control link. Rates: the member's own figure at its final weights-progress
// (bytes over the transfer's time) and bytes over load_ms (assignment to ready, shard build included).
// Run: npx tsx bench/weights-transfer.ts [label]
// Prints a table and writes bench/results/weights-transfer.json (rows are appended by label).
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing } from '../electron/engine/test-support/fault-ring.js';
import { kiwiEntry, ProcessSet, repoRoot } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);
const label = process.argv[2] ?? 'current';
const procs = new ProcessSet();
const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-weights-'));
try {
  const model = join(dir, 'wt.gguf');
  const shape = { name: 'wt', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 4, feedForwardLength: 1408, vocabSize: 320, contextLength: 256 };
  await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'f32', '--out', model, '--json'], { cwd: repoRoot });
  const sizes = modelSizesFromGguf(await openGguf(model));
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 256;
  const hostCaps = join(dir, 'capabilities-host.json');
  await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + perBlock + perBlock / 2 } }));
  const ring = await FaultRing.start(procs, { model, members: [{ name: 'm1', memoryBytes: 16 * perBlock }], dir, hostArgs: ['--capabilities', hostCaps], formTimeoutMs: 300_000 });
  const progress = ring.member('m1').events.filter((e) => e.event === 'weights-progress');
  const ready = ring.member('m1').events.find((e) => e.event === 'ready')!;
  const row = { label, bytes: ready.transferred_bytes as number, load_ms: ready.load_ms as number, mb_s: (ready.transferred_bytes as number) / 1e6 / ((ready.load_ms as number) / 1000), member_reported_mb_s: ((progress.at(-1)?.bytes_per_s as number | null) ?? 0) / 1e6 };
  console.log('label\tMB\tload ms\tMB/s (to ready)\tMB/s (member)');
  console.log(`${row.label}\t${(row.bytes / 1e6).toFixed(1)}\t${row.load_ms}\t${row.mb_s.toFixed(1)}\t${row.member_reported_mb_s.toFixed(1)}`);
  const out = join(repoRoot, 'bench/results/weights-transfer.json');
  await mkdir(join(repoRoot, 'bench/results'), { recursive: true });
  let rows: unknown[] = [];
  try {
    rows = (JSON.parse(await readFile(out, 'utf8')) as { rows: unknown[] }).rows;
  } catch {
    // First run.
  }
  await writeFile(out, JSON.stringify({ bench: 'weights-transfer', measured_at: new Date().toISOString(), rows: [...rows.filter((r) => (r as { label: string }).label !== label), row] }, null, 2));
} finally {
  procs.killAll();
  await procs.dispose();
  await rm(dir, { recursive: true, force: true });
}
