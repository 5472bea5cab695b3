// How fast a member receives its weights from the host (real processes on loopback), side by side
// in one run: the encrypted stream through the session (`--weights-http off`) and the host's HTTP
// range server (pipeline/weights-http.ts, the default when direct links are on, with the member's
// own token), the latter with one member and with two members receiving at once (rates per
// member). A synthetic f32 model of about 570 MB under the system's temp folder (big enough that
// setting up does not dominate), a host that holds almost nothing, members that receive nearly all
// layers between them; each member writes and hashes the bytes as they arrive. Two rates per row:
// the transfer (the member's transfer_ms: from the first byte asked for to the last one hashed and
// on disk) and "to ready" (load_ms: assignment to a ready stage, the shard build included). Then
// the HTTP path alone in this one process (server and fetch share its CPU time), one span at a
// time and PARALLEL_SPANS at once.
// Run: npx tsx bench/weights-transfer.ts [label]
// Prints a table and writes bench/results/weights-transfer.json (rows are replaced by label, path
// and member), then every label in that file side by side. Before-figures of an older commit: copy
// this file into a checkout of it (`git archive C | tar -x -C DIR`, node_modules linked) and run it
// there with KIWI_BENCH_RESULTS pointing at this checkout's JSON.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { hashSpans, PartialModel, stageSpans } from '../electron/engine/pipeline/member-weights.js';
import { fetchSpans, PARALLEL_SPANS } from '../electron/engine/pipeline/span-fetch.js';
import { startWeightsHttp } from '../electron/engine/pipeline/weights-http.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing } from '../electron/engine/test-support/fault-ring.js';
import { kiwiEntry, ProcessSet, repoRoot } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);
const label = process.argv[2] ?? 'current';
const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-weights-'));
const PATHS = [
  { path: 'encrypted-stream', hostArgs: ['--weights-http', 'off'], source: 'host', members: 1 },
  { path: 'host-http', hostArgs: [], source: 'host-http', members: 1 },
  { path: 'host-http-2-members', hostArgs: [], source: 'host-http', members: 2 },
] as const;

interface Row {
  label: string;
  path: string;
  /** The member this row measures (ring rows), '-' for the fetch-only rows. */
  member: string;
  /** Members receiving at once. */
  members: number;
  source: string;
  bytes: number;
  /** First byte asked for to the last one hashed and on disk. */
  transfer_ms: number;
  transfer_mb_s: number;
  /** Assignment to ready (the shard build included); null for the fetch-only rows. */
  load_ms: number | null;
  ready_mb_s: number | null;
  progress_events: number | null;
  /** Fetch-only rows: this process's CPU time (both ends, all threads) and MB per CPU-second: a figure the machine's load does not change much. */
  cpu_ms: number | null;
  mb_per_cpu_s: number | null;
  load_average_1m: number;
  /** The model's file size: the side-by-side table compares rows of the same model only. */
  model_bytes: number;
}

const mbs = (bytes: number, ms: number): number => bytes / 1e6 / (ms / 1000);

try {
  const model = join(dir, 'wt.gguf');
  const shape = { name: 'wt', architecture: 'llama', blockCount: 12, embeddingLength: 1024, headCount: 8, headCountKv: 4, feedForwardLength: 2816, vocabSize: 320, contextLength: 256 };
  await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'f32', '--out', model, '--json'], { cwd: repoRoot });
  const modelBytes = (await stat(model)).size;
  const sizes = modelSizesFromGguf(await openGguf(model));
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 256;
  const hostCaps = join(dir, 'capabilities-host.json');
  await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + perBlock + perBlock / 2 } }));
  const rows: Row[] = [];
  // KIWI_BENCH_PATHS=host-http,... runs only those ring rows (a profile of one of them).
  const only = process.env.KIWI_BENCH_PATHS?.split(',');
  for (const p of PATHS.filter((x) => only === undefined || only.includes(x.path))) {
    const procs = new ProcessSet();
    const runDir = join(dir, p.path);
    await mkdir(runDir, { recursive: true });
    try {
      const names = Array.from({ length: p.members }, (_, i) => `m${i + 1}`);
      // The members hold all but the host's block between them.
      const memoryBytes = Math.ceil((2 * shape.blockCount * perBlock) / p.members);
      const ring = await FaultRing.start(procs, { model, members: names.map((name) => ({ name, memoryBytes })), dir: runDir, hostArgs: ['--capabilities', hostCaps, ...p.hostArgs], formTimeoutMs: 300_000 });
      for (const name of names) {
        const progress = ring.member(name).events.filter((e) => e.event === 'weights-progress');
        const ready = ring.member(name).events.find((e) => e.event === 'ready')!;
        if (ready.source !== p.source) throw new Error(`${p.path}: ${name} loaded from ${String(ready.source)}, not ${p.source}`);
        const bytes = ready.transferred_bytes as number;
        const loadMs = ready.load_ms as number;
        const transferMs = ready.transfer_ms as number;
        rows.push({ label, path: p.path, member: name, members: p.members, source: p.source, bytes, transfer_ms: transferMs, transfer_mb_s: mbs(bytes, transferMs), load_ms: loadMs, ready_mb_s: mbs(bytes, loadMs), progress_events: progress.length, cpu_ms: null, mb_per_cpu_s: null, load_average_1m: loadavg()[0]!, model_bytes: modelBytes });
      }
    } finally {
      procs.killAll();
      await procs.dispose();
    }
  }
  // The HTTP path alone, in this one process (no ring, no shard build): the host's server and the
  // member's fetchSpans (write + sha256 as bytes arrive) over loopback, the same spans.
  {
    const file = await openGguf(model);
    const spans = await hashSpans(model, stageSpans(file, { start: 0, end: shape.blockCount }));
    const server = await startWeightsHttp(model, { host: '127.0.0.1' });
    try {
      const token = await server.grant('bench', spans);
      for (const parallel of [1, PARALLEL_SPANS]) {
        const partial = await PartialModel.open(join(dir, `direct-${parallel}`), 'd'.repeat(64), file.fileSize);
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        let bytes = 0;
        await fetchSpans(server.urls[0]!, spans, partial, (n) => (bytes += n), { token, parallel });
        const ms = performance.now() - t0;
        const cpu = process.cpuUsage(cpu0);
        const cpuMs = (cpu.user + cpu.system) / 1000;
        rows.push({ label, path: `host-http-fetch-only-x${parallel}`, member: '-', members: 1, source: 'host-http', bytes, transfer_ms: ms, transfer_mb_s: mbs(bytes, ms), load_ms: null, ready_mb_s: null, progress_events: null, cpu_ms: cpuMs, mb_per_cpu_s: mbs(bytes, cpuMs), load_average_1m: loadavg()[0]!, model_bytes: modelBytes });
      }
    } finally {
      await server.close();
    }
  }
  const fixed = (v: number | null, digits = 1): string => (v === null ? '-' : v.toFixed(digits));
  console.log('label\tpath\tmember\tMB\ttransfer ms\tMB/s (transfer)\tready ms\tMB/s (to ready)\tprogress events\tMB/cpu-s\tload 1m');
  for (const r of rows) {
    console.log(`${r.label}\t${r.path}\t${r.member}\t${(r.bytes / 1e6).toFixed(1)}\t${Math.round(r.transfer_ms)}\t${r.transfer_mb_s.toFixed(1)}\t${fixed(r.load_ms, 0)}\t${fixed(r.ready_mb_s)}\t${r.progress_events ?? '-'}\t${fixed(r.mb_per_cpu_s, 0)}\t${r.load_average_1m.toFixed(2)}`);
  }
  const out = process.env.KIWI_BENCH_RESULTS ?? join(repoRoot, 'bench/results/weights-transfer.json');
  await mkdir(dirname(out), { recursive: true });
  let earlier: unknown[] = [];
  try {
    earlier = (JSON.parse(await readFile(out, 'utf8')) as { rows: unknown[] }).rows;
  } catch {
    // First run.
  }
  const key = (r: unknown): string => `${(r as { label: string }).label}/${(r as { path?: string }).path ?? 'encrypted-stream'}/${(r as { member?: string }).member ?? 'm1'}`;
  const fresh = new Set(rows.map(key));
  const all = [...(earlier as Row[]).filter((r) => !fresh.has(key(r))), ...rows];
  await writeFile(out, JSON.stringify({ bench: 'weights-transfer', measured_at: new Date().toISOString(), rows: all }, null, 2));
  // Every label's MB/s over the transfer per row, side by side (with the load it ran at).
  const same = all.filter((r) => r.model_bytes === rows[0]?.model_bytes);
  const labels = [...new Set(same.map((r) => r.label))];
  console.log(`\npath / member\t${labels.join('\t')}`);
  for (const row of [...new Set(same.map((r) => `${r.path}\t${r.member}`))]) {
    const cells = labels.map((l) => same.find((r) => r.label === l && `${r.path}\t${r.member}` === row)).map((r) => (r === undefined ? '-' : `${r.transfer_mb_s.toFixed(0)} (load ${r.load_average_1m.toFixed(1)})`));
    console.log(`${row.replace('\t', ' / ')}\t${cells.join('\t')}`);
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
