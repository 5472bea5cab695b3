// The ring end to end as real processes on loopback: a rendezvous, a host (`kiwi host --model`)
// and two members (`kiwi join`), one with its own copy of the model and one that receives its
// layers from the host; links direct, and once all relayed through the rendezvous. Greedy output through the OpenAI API (the official `openai` SDK) must be
// exactly `kiwi generate`'s on one machine, token for token, for stories260K and for a synthetic
// 8-layer model (and in the fast weight layout, the host's for every stage); several concurrent
// streaming clients each get their own correct text.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { askStatus, isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Proc, until, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function kiwiJson(...args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [...kiwiEntry(), ...args, '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
  return JSON.parse(stdout.trim().split('\n').pop() as string) as Record<string, unknown>;
}

interface Ring {
  url: string;
  host: Proc;
  members: Proc[];
}

/** rendezvous + host + two members; member `ada` has its own copy of the model, `bob` gets his layers from the host. */
async function startRing(model: string, extra: { host?: string[]; members?: string[] } = {}): Promise<Ring> {
  const hostArgs = extra.host ?? [];
  const memberArgs = extra.members ?? [];
  const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json', ...hostArgs);
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  const members = [
    kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json', ...memberArgs),
    kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json', ...memberArgs),
  ];
  const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000);
  return { url: serving.url as string, host, members };
}

const greedy = { temperature: 0 } as const;



describe('the ring served as an OpenAI API (real processes on loopback)', () => {
  it('plans the ring over both members and gives exactly the tokens of one machine for stories260K', async () => {
    const model = await testModelPath('stories260K.gguf');
    // --weights-http off: bob's layers come over the encrypted stream (ring.weights-http.process.test.ts covers the host's HTTP path).
    const ring = await startRing(model, { host: ['--weights-http', 'off'] });
    const [ada, bob] = ring.members as [Proc, Proc];

    // The plan: the host holds the head and its first blocks, each member a contiguous range.
    const plan = ring.host.events.find((e) => e.event === 'plan') as { stages: Array<{ device: string; start: number; end: number; head: boolean }> };
    expect(plan.stages[0]).toMatchObject({ device: 'host', start: 0, head: true });
    expect(plan.stages.map((s) => s.device).sort()).toEqual(['ada', 'bob', 'host']);
    expect(plan.stages.at(-1)?.end).toBe(5);
    for (const [m, name] of [[ada, 'ada'], [bob, 'bob']] as const) {
      const stage = plan.stages.find((s) => s.device === name)!;
      expect(m.events.find((e) => e.event === 'assigned')).toEqual({ event: 'assigned', start: stage.start, end: stage.end, head: false });
    }
    // ada used her own file; bob received exactly his tensors from the host, not the whole model.
    expect(await waitEvent(ada, (e) => e.event === 'ready', 'ada ready')).toMatchObject({ source: 'local', transferred_bytes: 0 });
    const bobReady = await waitEvent(bob, (e) => e.event === 'ready', 'bob ready');
    expect(bobReady.source).toBe('host');
    expect(bobReady.transferred_bytes as number).toBeGreaterThan(0);
    expect(bobReady.transferred_bytes as number).toBeLessThan(1_185_376);

    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const prompt = 'Once upon a time';
    const reference = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '48');
    const completion = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 48, ...greedy });
    expect(completion.choices[0]?.text).toBe(reference.text);
    expect(completion.usage?.completion_tokens).toBe((reference.ids as number[]).length);

    // Token for token: the prompt as ids, streamed, one chunk per token.
    const stream = await client.completions.create({ model: 'stories260K', prompt: reference.prompt_ids as number[], max_tokens: 48, stream: true, ...greedy });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
    expect(streamed).toBe(reference.text);

    const chatReference = await kiwiJson('generate', '--model', model, '--prompt', 'Tell me a story', '--chat', '--max-tokens', '32');
    const chat = await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 32, ...greedy });
    expect(chat.choices[0]?.message.content).toBe(chatReference.text);

    // A second OpenAI-compatible client library (the Vercel AI SDK), streaming and not.
    const provider = createOpenAICompatible({ name: 'kiwi', baseURL: ring.url, includeUsage: true });
    const sdkOptions = { model: provider('stories260K'), prompt: 'Tell me a story', maxOutputTokens: 32, temperature: 0 } as const;
    const sdkText = await generateText(sdkOptions);
    expect(sdkText.text).toBe(chatReference.text);
    let sdkStreamed = '';
    for await (const piece of streamText(sdkOptions).textStream) sdkStreamed += piece;
    expect(sdkStreamed).toBe(chatReference.text);

    // Concurrent streaming clients, two prompts interleaved: each gets its prompt's text.
    const other = 'The little dog';
    const otherReference = await kiwiJson('generate', '--model', model, '--prompt', other, '--max-tokens', '48');
    const prompts = Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? prompt : other));
    const texts = await Promise.all(
      prompts.map(async (p) => {
        const s = await client.completions.create({ model: 'stories260K', prompt: p, max_tokens: 48, stream: true, ...greedy });
        let text = '';
        for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
        return text;
      }),
    );
    texts.forEach((t, i) => expect(t).toBe(i % 2 === 0 ? reference.text : otherReference.text));

    // A client that disconnects mid-stream: its request ends and every stage frees its KV cache.
    const long = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 400, stream: true, ...greedy });
    let chunks = 0;
    for await (const _chunk of long) if (++chunks === 3) break;
    await until(async () => {
      const host = await askStatus(ring.host);
      // Blocks the prompt cache holds for earlier prompts are not the cancelled request's.
      const kv = host.kv as { freeBlocks: number; totalBlocks: number; cachedBlocks: number };
      const members = await Promise.all(ring.members.map(askStatus));
      return kv.freeBlocks + kv.cachedBlocks === kv.totalBlocks && members.every((m) => m.requests === 0);
    }, 'every stage to free the cancelled request');
    const hostStatus = await askStatus(ring.host);
    expect(hostStatus.requests).toMatchObject({ cancelled: 1, failed: 0 });
    const timing = hostStatus.timing as { steps: number; meanStageMs: Record<string, number> };
    expect(timing.steps).toBeGreaterThan(0);
    expect(Object.keys(timing.meanStageMs).sort()).toEqual(plan.stages.slice(1).map((s) => `${s.start}-${s.end}`).sort());
    expect(ring.host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 180_000);

  it('gives exactly the tokens of one machine for a synthetic 8-layer model over relayed, zstd-compressed links', async () => {
    const model = join(tempDir(), 'tiny8.gguf');
    const shape = { name: 'tiny8', architecture: 'llama', blockCount: 8, embeddingLength: 64, headCount: 4, headCountKv: 2, feedForwardLength: 160, vocabSize: 320, contextLength: 512 };
    await kiwiJson('synth', '--shape', JSON.stringify(shape), '--quant', 'q8_0', '--out', model, '--seed', '7');
    const ring = await startRing(model, { host: ['--zstd', 'on', '--relay-only'], members: ['--relay-only'] });
    const links = ring.host.events.filter((e) => e.event === 'link' && typeof e.rtt_ms === 'number');
    expect(links.length).toBeGreaterThanOrEqual(3);
    expect(links.every((e) => e.kind === 'relayed')).toBe(true);
    const plan = ring.host.events.find((e) => e.event === 'plan') as { stages: Array<{ start: number; end: number }> };
    expect(plan.stages[0]?.start).toBe(0);
    expect(plan.stages.at(-1)?.end).toBe(8);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    for (const prompt of ['hello world', 'a b c d e f']) {
      const reference = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '40');
      const got = await client.completions.create({ model: 'tiny8', prompt: reference.prompt_ids as number[], max_tokens: 40, ...greedy });
      expect(got.choices[0]?.text).toBe(reference.text);
      expect(got.usage?.completion_tokens).toBe((reference.ids as number[]).length);
    }
  }, 180_000);

  it('builds every stage in the host\'s weight layout (--weight-layout fast): the tokens of one machine in that layout', async () => {
    const model = join(tempDir(), 'tiny-q4_0.gguf');
    // Rows of 256: whole blocks of the fast layout's 128.
    const shape = { name: 'tiny-q4', architecture: 'llama', blockCount: 6, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 320, contextLength: 256 };
    await kiwiJson('synth', '--shape', JSON.stringify(shape), '--quant', 'q4_0', '--out', model, '--seed', '11');
    const ring = await startRing(model, { host: ['--weight-layout', 'fast'] });
    const prompt = 'a b c d';
    const fast = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '24', '--weight-layout', 'fast');
    const exact = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '24');
    // The layouts give other tokens on random weights, so the ring's match says every stage built the fast one.
    expect(fast.text).not.toBe(exact.text);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const got = await client.completions.create({ model: 'tiny-q4_0', prompt: fast.prompt_ids as number[], max_tokens: 24, ...greedy });
    expect(got.choices[0]?.text).toBe(fast.text);
  }, 180_000);

  it('chooses each link\'s activation encoding from its measured throughput with --activations auto (stories260K keeps every token)', async () => {
    const model = await testModelPath('stories260K.gguf');
    // Every link measures its own throughput as it comes up; each stage's wire is chosen from its outgoing link.
    const ring = await startRing(model, { host: ['--activations', 'auto'] });
    const links = ring.host.events.filter((e) => e.event === 'link' && typeof e.rtt_ms === 'number');
    expect(links.length).toBeGreaterThanOrEqual(3);
    for (const l of links) expect(l.throughput_mbps as number).toBeGreaterThan(0);
    const stages = ring.host.events.filter((e) => e.event === 'stage-ready');
    expect(stages.length).toBe(3);
    for (const s of stages) expect(s.wire).toMatch(/^(f32|f16|int8)(\+zstd)?$/);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const reference = await kiwiJson('generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '48');
    const got = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 48, ...greedy });
    expect(got.choices[0]?.text).toBe(reference.text);
  }, 180_000);
});
