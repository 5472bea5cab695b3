// Recovery with and without standby layers (issue 15): host + 2 members on loopback, a synthetic
// f32 model of BLOCKS layers (hidden HIDDEN), the first member killed with SIGKILL at the 10th
// streamed token; the survivor takes over its layers. Per round and mode: kill -> next token (the
// client's stall), the host's recovered duration and bytes moved, and the survivor's load. Each
// round's text is checked against `kiwi generate`. Usage: npx tsx bench/standby.ts [rounds=3]
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing, generateReference, stallAfter, streamCompletion } from '../electron/engine/test-support/fault-ring.js';
import { kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../electron/engine/test-support/processes.js';

const BLOCKS = 8;
const HIDDEN = 512;
const rounds = Number(process.argv[2] ?? 3);
const procs = new ProcessSet();
const root = await mkdtemp(join(tmpdir(), 'kiwi-bench-standby-'));
const model = join(root, 'standby.gguf');
const shape = { name: 'standby', architecture: 'llama', blockCount: BLOCKS, embeddingLength: HIDDEN, headCount: 8, headCountKv: 4, feedForwardLength: 1408, vocabSize: 320, contextLength: 1024 };
await promisify(execFile)(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'f32', '--out', model, '--seed', '7', '--json'], { cwd: repoRoot });
const file = await openGguf(model);
const want = (await generateReference(model, 'hello world', 48)).text;
const sizes = modelSizesFromGguf(file);
const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 1024;
const rows: string[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    for (const standby of [true, false]) {
      const dir = join(root, `r${r}-${standby ? 'with' : 'without'}`);
      await mkdir(dir);
      const hostCaps = join(dir, 'capabilities-host.json');
      await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + 2 * perBlock + perBlock / 2 } }));
      const ring = await FaultRing.start(procs, {
        model, dir, heartbeatMs: 500, heartbeatTimeoutS: 10, recoveryTimeoutS: 60, hostArgs: ['--capabilities', hostCaps, '--prompt-cache-mb', '0'],
        members: ['m1', 'm2'].map((name) => ({ name, memoryBytes: 6 * perBlock + perBlock / 2, args: standby ? ['--standby-gb', '1'] : [] })),
      });
      const ranges = (await ring.status()).stages.filter((s) => s.peer !== 0);
      const [victim, survivor] = [ranges[0]!.name, ranges[1]!.name];
      const t0 = Date.now();
      const done = standby ? await waitEvent(ring.member(survivor), (e) => e.event === 'standby', 'standby layers', 120_000) : undefined;
      const standbyS = (Date.now() - t0) / 1000;
      let killedAt = 0;
      const got = await streamCompletion(ring.url, { model: 'standby', prompt: 'hello world', maxTokens: 48 }, (i) => {
        if (i === 10) {
          killedAt = Date.now();
          ring.signal(victim, 'SIGKILL');
        }
      }, { stallMs: 120_000 });
      await ring.waitStatus((s) => s.phase === 'serving' && (s.recoveries?.length ?? 0) >= 1, 'serving again', 120_000, 250);
      const rec = ring.hostEvents('recovered')[0]!;
      const last = ring.member(survivor).events.filter((e) => e.event === 'ready').at(-1)!;
      const row = `| ${r + 1} | ${standby ? `yes (${(done?.layers as number[]).length} layers, ${((done?.fetched_bytes as number) / 2 ** 20).toFixed(1)} MiB in ${standbyS.toFixed(1)} s)` : 'no'} | ${stallAfter(got.pieces, killedAt)} | ${rec.duration_ms} | ${((rec.bytes_moved as number) / 2 ** 20).toFixed(1)} | ${last.source} | ${last.load_ms} | ${got.text === want ? 'yes' : 'NO'} | ${loadavg()[0]!.toFixed(1)} |`;
      console.log(row);
      rows.push(row);
      procs.killAll();
    }
  }
  console.log(`\nsynth f32 ${BLOCKS} x ${HIDDEN}, ${(file.fileSize / 2 ** 20).toFixed(0)} MiB; host 2 blocks, members 3 + 3, the first killed at token 10\n`);
  console.log('| round | standby | kill -> next token ms | recovered ms | moved MiB | survivor source | survivor load ms | text exact | load |\n|---|---|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
} finally {
  procs.killAll();
  procs.dispose();
  await rm(root, { recursive: true, force: true });
}
