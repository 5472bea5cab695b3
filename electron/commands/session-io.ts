// Shared plumbing of the long-running session commands (rendezvous, host, join): waiting for the
// command's abort signal (Ctrl-C / SIGTERM, see electron/kiwi.ts), and printing events as text or
// JSON lines (ARCHITECTURE.md's CLI contract).
import type { Writable } from 'node:stream';
import { writeJson } from './command.js';

/** Resolves when the command's abort signal fires or `extra` settles. */
export function untilStopped(signal: AbortSignal, extra?: Promise<unknown>): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      signal.removeEventListener('abort', done);
      resolve();
    };
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', done, { once: true });
    void extra?.then(done, done);
  });
}

export type EventPrinter = (event: string, fields: Record<string, unknown>, text: string) => void;

export function eventPrinter(out: Writable, json: boolean): EventPrinter {
  return (event, fields, text) => {
    if (json) writeJson(out, { event, ...fields });
    else out.write(`${text}\n`);
  };
}
