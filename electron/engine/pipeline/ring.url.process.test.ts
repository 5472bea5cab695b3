// Weights from the model's URL, as real processes on loopback: `kiwi host --model-url` downloads the
// model from a local HTTP server, and a member without a copy fetches exactly its tensors' byte
// ranges (and the header) from that server; when the URL fails, the host streams them instead.
// Either way greedy output through the API is `kiwi generate`'s on one machine.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { kiwiEntry, ProcessSet, repoRoot, waitEvent, type Proc } from '../test-support/processes.js';
import { startRangeServer, type RangeServer } from '../test-support/range-server.js';
import { stageSpans } from './member-weights.js';

const run = promisify(execFile);
const procs = new ProcessSet();
let dir: string;
let savedCacheDir: string | undefined;
let server: RangeServer | undefined;
let model: string;
let reference: { text: string; prompt_ids: number[] };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-ring-url-'));
  savedCacheDir = process.env.KIWI_CACHE_DIR;
  model = await testModelPath('stories260K.gguf');
  const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '32', '--json'], { cwd: repoRoot });
  reference = JSON.parse(stdout.trim().split('\n').pop() as string) as typeof reference;
});
afterEach(async () => {
  procs.killAll();
  await server?.close();
  server = undefined;
});
afterAll(async () => {
  procs.dispose();
  if (savedCacheDir === undefined) delete process.env.KIWI_CACHE_DIR;
  else process.env.KIWI_CACHE_DIR = savedCacheDir;
  await rm(dir, { recursive: true, force: true });
});

const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

/** A host serving the model from `url`, `ada` with her own copy and `bob` with none; each test gets a fresh cache. */
async function startRing(url: string, cache: string, onModel: () => void = () => {}, hostArgs: string[] = []): Promise<{ api: string; host: Proc; bob: Proc }> {
  process.env.KIWI_CACHE_DIR = join(dir, cache);
  const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = kiwi('host', '--model-url', url, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json', ...hostArgs);
  expect(await waitEvent(host, (e) => e.event === 'model', 'the downloaded model')).toMatchObject({ url, downloaded: true });
  onModel();
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json');
  const bob = kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json');
  const api = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000)).url as string;
  return { api, host, bob };
}

async function completes(api: string): Promise<void> {
  const client = new OpenAI({ baseURL: api, apiKey: 'unused', maxRetries: 0 });
  const got = await client.completions.create({ model: 'stories260K', prompt: reference.prompt_ids, max_tokens: 32, temperature: 0 });
  expect(got.choices[0]?.text).toBe(reference.text);
}

describe('a member\'s weights from the model\'s URL (real processes on loopback)', () => {
  it('fetches exactly the header and its tensors\' byte ranges from the URL the host downloaded the model from', async () => {
    server = await startRangeServer({ body: await readFile(model) });
    const url = `${server.url}/stories260K.gguf`;
    const { api, host, bob } = await startRing(url, 'a');
    // The host's own download: one whole-file request.
    expect(server.requests[0]).toEqual({ path: '/stories260K.gguf', range: undefined });
    const assigned = await waitEvent(bob, (e) => e.event === 'assigned', 'bob assigned');
    const spans = stageSpans(await openGguf(model), { start: assigned.start as number, end: assigned.end as number });
    const ready = await waitEvent(bob, (e) => e.event === 'ready', 'bob ready');
    expect(ready).toMatchObject({ source: 'url', transferred_bytes: spans.reduce((n, s) => n + s.bytes, 0) });
    expect(server.requests.slice(1).map((r) => r.range)).toEqual(spans.map((s) => `bytes=${s.offset}-${s.offset + s.bytes - 1}`));
    await completes(api);
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 90_000);

  it('receives its weights from the host when the URL fails', async () => {
    server = await startRangeServer({ body: await readFile(model) });
    const failing = server;
    // --weights-http off: after the URL, the encrypted stream (not the host's range server) gets the rest.
    const { api, bob } = await startRing(`${server.url}/stories260K.gguf`, 'b', () => (failing.options.status = 500), ['--weights-http', 'off']);
    expect(await waitEvent(bob, (e) => e.event === 'warning', 'bob\'s warning')).toMatchObject({ code: 'WEIGHTS_TRANSFER_FAILED' });
    const ready = await waitEvent(bob, (e) => e.event === 'ready', 'bob ready');
    expect(ready.source).toBe('host');
    expect(ready.transferred_bytes as number).toBeGreaterThan(0);
    expect(server.requests.slice(1).every((r) => r.range !== undefined)).toBe(true);
    await completes(api);
  }, 90_000);
});
