// How fast a member receives its weights from the host (real processes on loopback), two ways side
// by side in one run: the encrypted stream through the session (`--weights-http off`) and the
// host's HTTP range server (pipeline/weights-http.ts, the default when direct links are on). A
// synthetic f32 model of about 100 MB, a host that holds almost nothing, one member that receives
// nearly all layers; the member writes and hashes the bytes as they arrive. Rates: the member's
// own figure at its final weights-progress (bytes over the transfer's time) and bytes over load_ms
// (assignment to ready, shard build included).
// Run: npx tsx bench/weights-transfer.ts [label]
// Prints a table and writes bench/results/weights-transfer.json (rows are appended by label and path).
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { fetchSpans, hashSpans, PartialModel, stageSpans } from '../electron/engine/pipeline/member-weights.js';
import { startWeightsHttp } from '../electron/engine/pipeline/weights-http.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing } from '../electron/engine/test-support/fault-ring.js';
import { kiwiEntry, ProcessSet, repoRoot } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);
const label = process.argv[2] ?? 'current';
const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-weights-'));
const PATHS = [
  { path: 'encrypted-stream', hostArgs: ['--weights-http', 'off'], source: 'host' },
  { path: 'host-http', hostArgs: [], source: 'host-http' },
] as const;
try {
  const model = join(dir, 'wt.gguf');
  const shape = { name: 'wt', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 4, feedForwardLength: 1408, vocabSize: 320, contextLength: 256 };
  await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'f32', '--out', model, '--json'], { cwd: repoRoot });
  const sizes = modelSizesFromGguf(await openGguf(model));
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 256;
  const hostCaps = join(dir, 'capabilities-host.json');
  await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + perBlock + perBlock / 2 } }));
  const rows: Array<{ label: string; path: string; source: string; bytes: number; load_ms: number; mb_s: number; member_reported_mb_s: number; progress_events: number }> = [];
  for (const p of PATHS) {
    const procs = new ProcessSet();
    const runDir = join(dir, p.path);
    await mkdir(runDir, { recursive: true });
    try {
      const ring = await FaultRing.start(procs, { model, members: [{ name: 'm1', memoryBytes: 16 * perBlock }], dir: runDir, hostArgs: ['--capabilities', hostCaps, ...p.hostArgs], formTimeoutMs: 300_000 });
      const progress = ring.member('m1').events.filter((e) => e.event === 'weights-progress');
      const ready = ring.member('m1').events.find((e) => e.event === 'ready')!;
      if (ready.source !== p.source) throw new Error(`${p.path}: the member loaded from ${String(ready.source)}, not ${p.source}`);
      const bytes = ready.transferred_bytes as number;
      const loadMs = ready.load_ms as number;
      rows.push({ label, path: p.path, source: ready.source as string, bytes, load_ms: loadMs, mb_s: bytes / 1e6 / (loadMs / 1000), member_reported_mb_s: ((progress.at(-1)?.bytes_per_s as number | null) ?? 0) / 1e6, progress_events: progress.length });
    } finally {
      procs.killAll();
      await procs.dispose();
    }
  }
  // The HTTP path alone, in one process (no ring, no shard build): the host's server and the
  // member's fetchSpans (write + sha256 as bytes arrive) over loopback, the same spans.
  {
    const file = await openGguf(model);
    const spans = await hashSpans(model, stageSpans(file, { start: 0, end: shape.blockCount }));
    const server = await startWeightsHttp(model, { host: '127.0.0.1' });
    try {
      const partial = await PartialModel.open(join(dir, 'direct'), 'd'.repeat(64), file.fileSize);
      const t0 = performance.now();
      let bytes = 0;
      await fetchSpans(server.urls[0]!, spans, partial, (n) => (bytes += n), { token: server.token });
      const ms = performance.now() - t0;
      rows.push({ label, path: 'host-http-fetch-only', source: 'host-http', bytes, load_ms: ms, mb_s: bytes / 1e6 / (ms / 1000), member_reported_mb_s: bytes / 1e6 / (ms / 1000), progress_events: 0 });
    } finally {
      await server.close();
    }
  }
  console.log('label\tpath\tMB\tload ms\tMB/s (to ready)\tMB/s (member)\tprogress events');
  for (const r of rows) console.log(`${r.label}\t${r.path}\t${(r.bytes / 1e6).toFixed(1)}\t${Math.round(r.load_ms)}\t${r.mb_s.toFixed(1)}\t${r.member_reported_mb_s.toFixed(1)}\t${r.progress_events}`);
  const out = join(repoRoot, 'bench/results/weights-transfer.json');
  await mkdir(join(repoRoot, 'bench/results'), { recursive: true });
  let earlier: unknown[] = [];
  try {
    earlier = (JSON.parse(await readFile(out, 'utf8')) as { rows: unknown[] }).rows;
  } catch {
    // First run.
  }
  const key = (r: unknown): string => `${(r as { label: string }).label}/${(r as { path?: string }).path ?? 'encrypted-stream'}`;
  const fresh = new Set(rows.map(key));
  await writeFile(out, JSON.stringify({ bench: 'weights-transfer', measured_at: new Date().toISOString(), rows: [...earlier.filter((r) => !fresh.has(key(r))), ...rows] }, null, 2));
} finally {
  await rm(dir, { recursive: true, force: true });
}
