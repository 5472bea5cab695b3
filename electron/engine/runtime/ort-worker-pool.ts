// The threads of worker sessions (ort-worker.ts): started from the script beside this module, and
// after a session's dispose kept idle for a few seconds, so the next session (a chain of stages, a
// re-plan opening new ranges, tests) skips the thread's start: loading onnxruntime, and tsx in dev.
// Idle threads are unref'd and end on their own: they never keep the process alive.
import { Worker, threadId } from 'node:worker_threads';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ortPackageDir } from '../ort/providers.js';
import { newGate, watchGate } from './ort-worker-gate.js';
import type { ToWorker } from './ort-worker-protocol.js';

/** Idle threads kept at most, and for how long. */
const IDLE_MAX = 1;
const IDLE_LINGER_MS = 5_000;

interface Parked {
  worker: Worker;
  timer: NodeJS.Timeout;
  onError: () => void;
  onExit: () => void;
}

const parked: Parked[] = [];

/** An idle thread if there is one, else a new one. */
export function takeWorker(): Worker {
  const p = parked.pop();
  if (p === undefined) return startWorker();
  unpark(p);
  return p.worker;
}

/** Keeps a thread whose session was released for the next taker; false if the pool is full. */
export function parkWorker(worker: Worker): boolean {
  if (parked.length >= IDLE_MAX) return false;
  worker.unref();
  const end = (): void => {
    drop(p);
    closeWorker(worker);
  };
  const p: Parked = { worker, timer: setTimeout(end, IDLE_LINGER_MS).unref(), onError: () => drop(p), onExit: () => drop(p) };
  worker.on('error', p.onError);
  worker.on('exit', p.onExit);
  parked.push(p);
  return true;
}

/** Ends an idle thread whose session was released: it closes its port and exits by itself
 * (see the 'close' message in ort-worker-protocol.ts for why not terminate()). */
export function closeWorker(worker: Worker): void {
  worker.unref();
  worker.on('error', () => {}); // an error while it winds down concerns no session any more
  worker.postMessage({ type: 'close' } satisfies ToWorker);
}

function unpark(p: Parked): void {
  clearTimeout(p.timer);
  p.worker.off('error', p.onError);
  p.worker.off('exit', p.onExit);
}

function drop(p: Parked): void {
  const i = parked.indexOf(p);
  if (i < 0) return;
  parked.splice(i, 1);
  unpark(p);
}

/**
 * The worker script beside this module: ort-worker.js in the build (dist/, an asar). Under tsx or
 * vitest the sources are TypeScript, which a worker cannot load by itself (Node 20 does not hand the
 * parent's loader hooks to workers, and tsx's loader started in each thread costs several times the
 * thread's own start), so the worker and its imports are bundled once per process instead.
 */
function startWorker(): Worker {
  const here = import.meta.url;
  // The script is plain JavaScript: none of the parent's node options apply (its -e, --input-type or
  // loaders would even stop the thread from starting).
  const gate = newGate();
  const options = { execArgv: [], workerData: { gate } };
  let worker: Worker;
  if (here.endsWith('.ts')) {
    devScript ??= bundleDevWorker(here);
    worker = new Worker(devScript, options);
  } else {
    worker = new Worker(new URL('./ort-worker.js', here), options);
  }
  worker.once('exit', watchGate(gate));
  return worker;
}

let devScript: URL | undefined;

/**
 * ort-worker.ts and what it imports from the engine as one ES module, written (under a content
 * hash, so processes share it) to node_modules/.cache/kiwi, where packages resolve as from the
 * sources. esbuild is tsx's own.
 */
function bundleDevWorker(here: string): URL {
  const require = createRequire(here);
  const esbuild = createRequire(require.resolve('tsx/package.json'))('esbuild') as {
    buildSync(o: Record<string, unknown>): { outputFiles: Array<{ text: string }> };
  };
  const entry = fileURLToPath(new URL('./ort-worker.ts', here));
  const built = esbuild.buildSync({
    entryPoints: [entry],
    absWorkingDir: dirname(entry), // source map paths, and so the hash, do not depend on the cwd
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    sourcemap: 'inline',
    write: false,
  });
  const text = built.outputFiles[0]!.text;
  // Beside onnxruntime-node's package, so the bundle's bare imports of it and the others resolve.
  const dir = join(dirname(ortPackageDir()), '.cache', 'kiwi');
  const file = join(dir, `ort-worker-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.mjs`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.${threadId}.tmp`;
    writeFileSync(tmp, text);
    renameSync(tmp, file);
  }
  return pathToFileURL(file);
}
