// Starts a worker thread on a module beside the caller: `name.js` in the built app, `name.ts` from
// source (tsx, tests), where the worker registers tsx's loader before importing the entry.
import { Worker, type WorkerOptions } from 'node:worker_threads';

/** A worker on the module `name` (no extension) next to `callerUrl` (the caller's import.meta.url). */
export function startModuleWorker(callerUrl: string, name: string, options: WorkerOptions = {}): Worker {
  const fromSource = callerUrl.endsWith('.ts');
  const entry = new URL(`./${name}.${fromSource ? 'ts' : 'js'}`, callerUrl);
  return fromSource
    ? new Worker(`import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(entry.href)}); })`, { ...options, eval: true })
    : new Worker(entry, options);
}
