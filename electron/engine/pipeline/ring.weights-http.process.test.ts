// Weights over the host's own HTTP range server (weights-http.ts), as real processes on loopback:
// a member without a copy loads its layers from the host's file over plain HTTP with the token its
// encrypted weights-plan carried (source host-http), exactly its tensors' bytes, and the ring gives
// `kiwi generate`'s tokens. (The fallback to the encrypted stream when no address of the server
// answers is weights-receipt.test.ts; --weights-http off is ring.process.test.ts.)
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../test-support/processes.js';
import { stageSpans } from './member-weights.js';

const run = promisify(execFile);
const procs = new ProcessSet();
let dir: string;
let savedCacheDir: string | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-ring-weights-http-'));
  savedCacheDir = process.env.KIWI_CACHE_DIR;
  process.env.KIWI_CACHE_DIR = join(dir, 'cache');
});
afterAll(async () => {
  procs.killAll();
  procs.dispose();
  if (savedCacheDir === undefined) delete process.env.KIWI_CACHE_DIR;
  else process.env.KIWI_CACHE_DIR = savedCacheDir;
  await rm(dir, { recursive: true, force: true });
});

describe('a member\'s weights from the host\'s HTTP range server (real processes on loopback)', () => {
  it('loads exactly its tensors over the host\'s HTTP path and serves the tokens of one machine', async () => {
    const model = await testModelPath('stories260K.gguf');
    const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '32', '--json'], { cwd: repoRoot });
    const reference = JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string; prompt_ids: number[] };
    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--listen', '127.0.0.1', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--listen', '127.0.0.1', '--json');
    const bob = procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--listen', '127.0.0.1', '--json');
    const api = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000)).url as string;
    const assigned = await waitEvent(bob, (e) => e.event === 'assigned', 'bob assigned');
    const spans = stageSpans(await openGguf(model), { start: assigned.start as number, end: assigned.end as number });
    const ready = await waitEvent(bob, (e) => e.event === 'ready', 'bob ready');
    expect(ready).toMatchObject({ source: 'host-http', transferred_bytes: spans.reduce((n, s) => n + s.bytes, 0) });
    expect(bob.events.filter((e) => e.event === 'warning')).toEqual([]);
    const client = new OpenAI({ baseURL: api, apiKey: 'unused', maxRetries: 0 });
    const got = await client.completions.create({ model: 'stories260K', prompt: reference.prompt_ids, max_tokens: 32, temperature: 0 });
    expect(got.choices[0]?.text).toBe(reference.text);
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 120_000);
});
