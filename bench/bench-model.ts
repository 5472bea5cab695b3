// The random-weight model a bench runs on, shared by the benches that need one of a real shape:
// $KIWI_BENCH_MODEL, or a `kiwi synth` model written once and kept between runs in
// $TMPDIR/kiwi-bench-replay (writing a 1B model takes a while).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { kiwiEntry, repoRoot } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);

/** $KIWI_BENCH_MODEL, or the cached synthetic `shape` in `quant`. */
export async function benchModel(shape = 'llama-3.2-1b', quant = 'q4_0'): Promise<string> {
  if (process.env.KIWI_BENCH_MODEL !== undefined) return process.env.KIWI_BENCH_MODEL;
  const dir = join(tmpdir(), 'kiwi-bench-replay');
  const path = join(dir, `${shape}-${quant}.gguf`);
  if (!existsSync(path)) {
    await mkdir(dir, { recursive: true });
    console.error(`writing ${path} (kiwi synth)...`);
    await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', shape, '--quant', quant, '--out', path, '--seed', '1'], { cwd: repoRoot, maxBuffer: 1 << 26 });
  }
  return path;
}
