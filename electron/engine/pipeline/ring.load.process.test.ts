// The ring under load as real processes on loopback (rendezvous + `kiwi host` + two `kiwi join`):
// 16 simultaneous streaming `openai` SDK clients each get the greedy text of one machine for their
// prompt, every stage frees its KV and requests afterwards and the processes' memory does not
// grow from one round of 16 to the next, and once the admission queue is full `kiwi host`
// answers 429 with Retry-After.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { askStatus, isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Proc, until, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
isolatedCacheDir('kiwi-ring-load-');
afterAll(() => procs.dispose());

const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function generate(model: string, prompt: string, maxTokens: number): Promise<string> {
  const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', prompt, '--max-tokens', String(maxTokens), '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
  return (JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string }).text;
}



/** Resident memory of a process in bytes (Linux /proc). */
async function rss(p: Proc): Promise<number> {
  const text = await readFile(`/proc/${p.child.pid}/status`, 'utf8');
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(text);
  if (kb === null) throw new Error(`no VmRSS for process ${p.child.pid}`);
  return Number(kb[1]) * 1024;
}

const PARALLEL = 4;
const MAX_QUEUE = 12;

describe('the ring under concurrent load (real processes on loopback)', () => {
  it('streams 16 simultaneous clients their correct texts, frees everything after each round and answers 429 once the queue is full', async () => {
    const model = await testModelPath('stories260K.gguf');
    const prompts = ['Once upon a time', 'The little dog'];
    const references = await Promise.all(prompts.map((p) => generate(model, p, 48)));

    const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json',
      '--parallel', String(PARALLEL), '--max-queue', String(MAX_QUEUE));
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    const members = [
      kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json'),
      kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json'),
    ];
    const url = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000)).url as string;
    // No retries: a 429 or a dropped stream must fail the test, not be papered over.
    const client = new OpenAI({ baseURL: url, apiKey: 'unused', maxRetries: 0 });

    const streamText = async (prompt: string, maxTokens: number): Promise<string> => {
      const s = await client.completions.create({ model: 'stories260K', prompt, max_tokens: maxTokens, stream: true, temperature: 0 });
      let text = '';
      for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
      return text;
    };
    const settled = async (): Promise<void> => {
      await until(async () => {
        // Blocks the prompt cache keeps for the two prompts are given back to requests that need them.
        const kv = (await askStatus(host)).kv as { freeBlocks: number; totalBlocks: number; cachedBlocks: number };
        const counts = await Promise.all(members.map(async (m) => (await askStatus(m)).requests));
        return kv.freeBlocks + kv.cachedBlocks === kv.totalBlocks && counts.every((n) => n === 0);
      }, 'every stage to free its requests');
    };

    // 16 = PARALLEL running + MAX_QUEUE waiting: all admitted, none refused.
    const rounds: number[][] = [];
    for (let round = 0; round < 3; round++) {
      const texts = await Promise.all(Array.from({ length: PARALLEL + MAX_QUEUE }, (_, i) => streamText(prompts[i % 2]!, 48)));
      texts.forEach((t, i) => expect(t).toBe(references[i % 2]));
      await settled();
      rounds.push(await Promise.all([host, ...members].map(rss)));
    }
    const status = await askStatus(host);
    expect(status.requests).toEqual({ completed: 3 * 16, cancelled: 0, failed: 0 });
    // Round 0 warms up (graphs, KV buffers grown to size); rounds 1 and 2 repeat the same work, so
    // a leak per request would show as growth between them. The slack absorbs allocator noise.
    const [, first, second] = rounds as [number[], number[], number[]];
    second.forEach((bytes, i) => expect(bytes).toBeLessThan(first[i]! * 1.1 + 16 * 2 ** 20));

    // Fill the queue: PARALLEL long streams running (each has sent a token), MAX_QUEUE more waiting.
    const running = await Promise.all(Array.from({ length: PARALLEL }, async () => {
      const s = await client.completions.create({ model: 'stories260K', prompt: prompts[0]!, max_tokens: 400, stream: true, temperature: 0 });
      const it = s[Symbol.asyncIterator]();
      await it.next();
      return { s, it };
    }));
    const waiting = Array.from({ length: MAX_QUEUE }, () => streamText(prompts[1]!, 48));
    // /health counts the admitted requests; the one more is sent only once all of them arrived.
    const health = new URL('/health', url);
    await until(async () => {
      const load = (await (await fetch(health)).json()) as { running: number; waiting: number };
      return load.running + load.waiting === PARALLEL + MAX_QUEUE;
    }, 'the queue to fill');
    const refused = await fetch(`${url}/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories260K', prompt: 'one too many', max_tokens: 8 }),
    });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBe('rate_limit_error');
    // Everyone admitted still completes: the running ones are cancelled by closing, the waiting ones finish.
    for (const { s } of running) s.controller.abort();
    for (const t of await Promise.all(waiting)) expect(t).toBe(references[1]);
    await settled();
    expect((await askStatus(host)).requests).toMatchObject({ completed: 3 * 16 + MAX_QUEUE, cancelled: PARALLEL, failed: 0 });
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 120_000);
});
