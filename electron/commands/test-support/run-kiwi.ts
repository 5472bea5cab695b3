// Runs the `kiwi` CLI in-process (no child process) and collects what it prints.
import { PassThrough } from 'node:stream';
import { main } from '../../cli.js';

export interface KiwiRun {
  code: number;
  stdout: string;
  stderr: string;
}

export async function runKiwi(argv: string[], signal?: AbortSignal): Promise<KiwiRun> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const chunks = { out: '', err: '' };
  stdout.on('data', (c: Buffer) => (chunks.out += c.toString()));
  stderr.on('data', (c: Buffer) => (chunks.err += c.toString()));
  const code = await main(argv, { stdout, stderr, ...(signal !== undefined ? { signal } : {}) });
  return { code, stdout: chunks.out, stderr: chunks.err };
}
