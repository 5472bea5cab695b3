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

export interface EventPrinter {
  (event: string, fields: Record<string, unknown>, text: string): void;
  /**
   * A progress event of `key` (one member, one download): with --json every one (the engine sends
   * a few a second, engine/progress-rate.ts); as text, on a terminal one line per key updated in
   * place, else one line per key every `everyMs` (the first and the final one always).
   */
  progress(event: string, key: string, fields: Record<string, unknown>, text: string, final: boolean): void;
}

export interface PrinterOptions {
  /** Default: whether `out` is a terminal. */
  tty?: boolean;
  /** Without a terminal: at most one progress line per key this often. Default 5000. */
  everyMs?: number;
  now?: () => number;
}

const ESC = '\x1b[';

export function eventPrinter(out: Writable, json: boolean, opts: PrinterOptions = {}): EventPrinter {
  const tty = opts.tty ?? (out as Writable & { isTTY?: boolean }).isTTY === true;
  const everyMs = opts.everyMs ?? 5000;
  const now = opts.now ?? Date.now;
  // On a terminal: the live progress lines, drawn below everything else.
  const board = new Map<string, string>();
  let drawn = 0;
  const lastAt = new Map<string, number>();
  const fit = (text: string): string => {
    // A wrapped line would break the cursor arithmetic: cut it to the terminal's width.
    const columns = (out as Writable & { columns?: number }).columns;
    return columns !== undefined && columns > 1 && text.length >= columns ? `${text.slice(0, columns - 2)}…` : text;
  };
  const clear = (): string => (drawn > 0 ? `${ESC}${drawn}A\r${ESC}0J` : '');
  const draw = (): string => [...board.values()].map((t) => `${fit(t)}\n`).join('');
  const line = (text: string): void => {
    if (!tty || board.size === 0) {
      out.write(`${text}\n`);
      return;
    }
    // Above the live lines: clear them, write the line, draw them again.
    out.write(`${clear()}${text}\n${draw()}`);
    drawn = board.size;
  };
  const print = ((event, fields, text) => {
    if (json) writeJson(out, { event, ...fields });
    else line(text);
  }) as EventPrinter;
  print.progress = (event, key, fields, text, final) => {
    if (json) {
      writeJson(out, { event, ...fields });
      return;
    }
    if (tty) {
      const before = clear();
      if (final) board.delete(key);
      else board.set(key, text);
      // A finished transfer leaves its last line for good, above the live ones.
      out.write(`${before}${final ? `${text}\n` : ''}${draw()}`);
      drawn = board.size;
      return;
    }
    const at = now();
    const last = lastAt.get(key);
    if (!final && last !== undefined && at - last < everyMs) return;
    if (final) lastAt.delete(key);
    else lastAt.set(key, at);
    out.write(`${text}\n`);
  };
  return print;
}
