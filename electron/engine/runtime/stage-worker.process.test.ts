// A process whose stage runs on a worker thread stays alive while a forward pass is pending (the
// only thing it waits for) and exits on its own when its work is done, even if the stage was never
// disposed: an idle worker (a session's, or one kept in the pool) must not keep the process running.
// And a process that exits while a worker is inside onnxruntime ends cleanly.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { testModelPath } from '../model/test-models.js';
import { ProcessSet } from '../test-support/processes.js';

const procs = new ProcessSet();
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-stage-worker-proc-'));
});
afterAll(async () => {
  procs.dispose();
  await rm(dir, { recursive: true, force: true });
});

/** Exits the process while the worker is inside onnxruntime's run of a prefill (seen through its gate, not guessed from a delay). */
function exitDuringPrefill(model: string): string {
  return `
    import { openGguf } from './electron/engine/model/gguf/gguf-reader.ts';
    import { modelShapeFromGguf } from './electron/engine/runtime/decoder-shape.ts';
    import { Stage } from './electron/engine/runtime/stage.ts';
    import { nativeCallInFlight } from './electron/engine/runtime/ort-worker-gate.ts';
    const file = await openGguf(${JSON.stringify(model)});
    const shape = await modelShapeFromGguf(file);
    const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker: true });
    const ids = BigInt64Array.from({ length: 1000 }, (_, i) => BigInt(i % 300));
    // Exits once the worker is inside onnxruntime's run; prefills again until the poll sees one.
    setInterval(() => {
      if (!nativeCallInFlight()) return;
      console.log(JSON.stringify({ event: 'exiting' }));
      process.exit(0);
    }, 1);
    for (;;) await stage.forward({ kind: 'ids', ids, batch: 1, seq: ids.length }, [stage.emptyCache(1000)]);
  `;
}

/** Opens a stage, awaits one prefill with nothing else alive, prints the logits' size, never
 * disposes it; then opens and disposes a second stage (its thread goes to the pool). */
function script(model: string): string {
  return `
    import { openGguf } from './electron/engine/model/gguf/gguf-reader.ts';
    import { modelShapeFromGguf } from './electron/engine/runtime/decoder-shape.ts';
    import { Stage } from './electron/engine/runtime/stage.ts';
    const file = await openGguf(${JSON.stringify(model)});
    const shape = await modelShapeFromGguf(file);
    const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker: true });
    const out = await stage.forward({ kind: 'ids', ids: BigInt64Array.of(1n, 2n, 3n, 4n), batch: 1, seq: 4 }, [stage.emptyCache(16)]);
    console.log(JSON.stringify({ event: 'forward', values: out.logits.length }));
    // A disposed stage's thread waits idle in the pool for the next one: that must not hold the process either.
    const other = await Stage.open(file, shape, { start: 0, end: 2, head: false }, { threads: 1, worker: true });
    await other.dispose();
  `;
}

test('a process with an undisposed worker stage and an idle pooled thread finishes its forward pass and then exits by itself', async () => {
  const model = await testModelPath('stories260K.gguf');
  const p = procs.spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(model)]);
  const timeout = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 45_000).unref());
  const code = await Promise.race([p.exited, timeout]);
  expect(code, p.stderr.join('\n')).toBe(0);
  expect(p.events).toEqual([{ event: 'forward', values: 512 }]);
});

test('process.exit during a forward pass on a worker ends the process cleanly instead of aborting it', async () => {
  const model = join(dir, 'wide.gguf');
  const wide = { name: 'wide', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 1024, vocabSize: 320, contextLength: 1024 };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(wide)), quant: GgmlType.Q8_0, out: model, seed: 7 });
  const p = procs.spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', exitDuringPrefill(model)]);
  const timeout = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 45_000).unref());
  const code = await Promise.race([p.exited, timeout]);
  // Without the gate (ort-worker-gate.ts) onnxruntime-node aborts the process here: exit code 134.
  expect(code, p.stderr.join('\n')).toBe(0);
  expect(p.events).toEqual([{ event: 'exiting' }]);
});
