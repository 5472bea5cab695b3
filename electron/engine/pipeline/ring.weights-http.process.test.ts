// Weights over the host's own HTTP range server (weights-http.ts), as real processes on loopback:
// a member without a copy loads its layers from the host's file over plain HTTP with the token its
// encrypted weights-plan carried (source host-http), exactly its tensors' bytes, and the ring gives
// `kiwi generate`'s tokens. Each member's token reads only its own layers' bytes (403 elsewhere)
// and is refused once the member is planned out (test-support/weights-probe-member.ts shows the
// token it was given). (The fallback to the encrypted stream when no address of the server
// answers is weights-receipt.test.ts; --weights-http off is ring.process.test.ts.)
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { kiwiEntry, ProcessSet, repoRoot, tsEntry, waitEvent } from '../test-support/processes.js';
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

  it('gives each member a token for its own layers only, refused once it is planned out', async () => {
    const model = await testModelPath('stories260K.gguf');
    const file = await openGguf(model);
    const bytes = await readFile(model);
    // Little memory each, so both members get layers.
    const caps = join(dir, 'capabilities.json');
    await writeFile(caps, JSON.stringify({ fleet_device: { memory_bytes: 64 * 1024 * 1024 } }));
    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--capabilities', caps, '--heartbeat-ms', '500', '--json');
    const pia = procs.spawn(process.execPath, [...tsEntry('electron/engine/test-support/weights-probe-member.ts'), code, rendezvous, 'pia', caps]);
    const plan = await waitEvent(pia, (e) => e.event === 'weights-plan', 'pia\'s weights plan', 60_000);
    await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000);
    const url = (plan.urls as string[])[0]!;
    const token = plan.token as string;
    const get = (from: number, to: number): Promise<Response> => fetch(url, { headers: { authorization: `Bearer ${token}`, range: `bytes=${from}-${to}` } });
    const own = (plan.spans as Array<{ offset: number; bytes: number }>).find((s) => s.offset >= file.dataOffset && s.bytes > 0)!;
    const served = await get(own.offset, own.offset + own.bytes - 1);
    expect(served.status).toBe(206);
    expect(Buffer.from(await served.arrayBuffer()).equals(bytes.subarray(own.offset, own.offset + own.bytes))).toBe(true);
    // The head's tensors are never a member's: refused.
    const head = file.tensor('output_norm.weight')!;
    const refused = await get(head.offset, head.offset + head.byteLength - 1);
    expect(refused.status).toBe(403);
    expect(await refused.text()).toContain('not among this member\'s layers');
    // Planned out (it asked to leave): its token reads nothing any more.
    pia.child.stdin!.write('leave\n');
    await waitEvent(pia, (e) => e.event === 'released', 'pia released', 60_000);
    const revoked = await get(own.offset, own.offset + own.bytes - 1);
    expect(revoked.status).toBe(403);
    expect(await revoked.text()).toContain('no longer');
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 120_000);
});
