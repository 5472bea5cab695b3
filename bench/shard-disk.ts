// Disk use of a member's cache (issue 14: each layer stored once): a member receives the spans of
// its range into a partial model, opens its stage through the shard cache (which builds each
// layer's file) and releases the received bytes of the layers built; then a re-plan moves it to a
// second range, for which it receives only the layers it lacks and reuses the built ones. After
// each step: what the received model and the shard cache take on disk (allocated blocks, as du
// counts them) against the built bytes of the layers held. The same code paths as a member
// (pipeline/ring-member.ts), without the network: spans are copied from the model file.
// Run: npx tsx bench/shard-disk.ts MODEL.gguf [START-END ...]   (default ranges 6-16 3-16 3-16:
// the last one is a restart, its stage from the cache). Prints a table and writes
// bench/results/shard-disk.json.
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { diskBytesOf, modelFingerprint, ShardCache } from '../electron/engine/runtime/shard-cache.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import { hashSpans, PartialModel, stageSpans } from '../electron/engine/pipeline/member-weights.js';
import { builtSpans, partialCacheSource } from '../electron/engine/pipeline/member-layers.js';

const [modelPath, ...rangeArgs] = process.argv.slice(2);
if (modelPath === undefined) throw new Error('usage: npx tsx bench/shard-disk.ts MODEL.gguf [START-END ...]');
const ranges = (rangeArgs.length > 0 ? rangeArgs : ['6-16', '3-16', '3-16']).map((r) => {
  const [start, end] = r.split('-').map(Number);
  return { start: start!, end: end! };
});
const MiB = (n: number): string => (n / 2 ** 20).toFixed(1);

const dir = await mkdtemp(join(os.tmpdir(), 'kiwi-shard-disk-'));
const rows: Record<string, unknown>[] = [];
try {
  const source = await openGguf(modelPath);
  const fp = await modelFingerprint(source);
  const cache = new ShardCache(join(dir, 'shards'));
  const weightsDir = join(dir, 'weights');
  const fh = await open(modelPath, 'r');
  console.log('| step | range | stage | open s | received MiB | built layers | built MiB | received on disk MiB | shards on disk MiB | total MiB | total / built |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const [i, range] of ranges.entries()) {
    const spans = await hashSpans(modelPath, stageSpans(source, range));
    const partial = await PartialModel.open(weightsDir, fp, source.fileSize);
    // What the member asks for: the spans neither verified nor built (weights-receipt.ts).
    const header = spans.find((s) => s.offset === 0)!;
    const built = partial.holds(header) ? new Set(builtSpans(await openGguf(partial.path), spans, await cache.builtLayerTags(fp))) : new Set();
    const missing = partial.missing(spans.filter((s) => !built.has(s)));
    let received = 0;
    for (const s of missing) {
      const w = await partial.spanWriter(s);
      for (let at = 0; at < s.bytes; at += 1 << 22) {
        const buf = Buffer.allocUnsafe(Math.min(1 << 22, s.bytes - at));
        await fh.read(buf, 0, buf.length, s.offset + at);
        await w.write(buf);
      }
      await w.finish();
      received += s.bytes;
    }
    const file = await openGguf(partial.path);
    const shape = await modelShapeFromGguf(file, { maxPositions: 1024 });
    const t0 = performance.now();
    const stage = await Stage.open(file, shape, { ...range, head: false }, { cache, threads: 2, cacheSource: partialCacheSource(file, spans, (s) => partial.holds(s)) });
    const openS = ((performance.now() - t0) / 1000).toFixed(1);
    await stage.dispose();
    await partial.release(builtSpans(file, spans, await cache.builtLayerTags(fp)));
    let layers = 0;
    let layerBytes = 0;
    for (const m of await readdir(cache.dir)) {
      for (const f of await readdir(join(cache.dir, m))) {
        if (!/^layer-\d+-\w+\.bin$/.test(f)) continue;
        layers++;
        layerBytes += (await stat(join(cache.dir, m, f))).size;
      }
    }
    const raw = await diskBytesOf(weightsDir);
    const shards = await diskBytesOf(cache.dir);
    const step = i === 0 ? 'first assignment' : i === 1 ? 're-plan' : 'restart';
    rows.push({ step, start: range.start, end: range.end, source: stage.origin.source, open_s: Number(openS), received_bytes: received, built_layers: layers, built_bytes: layerBytes, received_disk_bytes: raw, shards_disk_bytes: shards, total_over_built: (raw + shards) / layerBytes });
    console.log(`| ${step} | ${range.start}-${range.end} | ${stage.origin.source} | ${openS} | ${MiB(received)} | ${layers} | ${MiB(layerBytes)} | ${MiB(raw)} | ${MiB(shards)} | ${MiB(raw + shards)} | ${((raw + shards) / layerBytes).toFixed(3)} |`);
  }
  await fh.close();
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'shard-disk.json'), JSON.stringify({ date: new Date().toISOString(), model: modelPath, loadavg: os.loadavg(), rows }, null, 2));
  console.log(`wrote ${join(out, 'shard-disk.json')}`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
