// Speculative decoding through a real ring (processes on loopback: rendezvous, host, two members):
// drafts travel as one multi-token row, every stage verifies them in one trip and drops the
// rejected positions before the request's next step. Greedy output must be exactly `kiwi
// generate`'s on one machine (no speculation there), with prompt lookup, across a recovery after a
// member is killed mid-stream, and with a draft model on the host; /health shows the acceptance.
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { kiwiJson, ProcessSet, type Proc, waitEvent } from '../test-support/processes.js';

const procs = new ProcessSet();
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());
const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function startRing(model: string, hostArgs: string[]): Promise<{ url: string; host: Proc; members: Map<string, Proc> }> {
  const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--no-bench', '--json', ...hostArgs);
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  const members = new Map(['ada', 'bob'].map((name) => [name, kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--model', model, '--json')]));
  const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 90_000);
  return { url: serving.url as string, host, members };
}

describe('speculative decoding through the ring', () => {
  it('gives exactly the greedy tokens of one machine without speculation, verifying drafts in one trip round the ring', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['--speculative', '4']);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const prompt = 'Once upon a time, there was a little girl named Lily. She liked to play outside. Once upon a time, there was a little girl named';
    const reference = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '64');
    const completion = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 64, temperature: 0 });
    expect(completion.choices[0]?.text).toBe(reference.text);
    expect(completion.usage?.completion_tokens).toBe((reference.ids as number[]).length);

    // Streamed with a stop sequence: the same text up to it.
    const stopAt = ' Lily';
    const stream = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 64, temperature: 0, stop: [stopAt], stream: true });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
    const text = reference.text as string;
    expect(streamed).toBe(text.includes(stopAt) ? text.slice(0, text.indexOf(stopAt)) : text);

    // A seed gives the same sampled text again with the same settings.
    const sampled = async () => (await client.completions.create({ model: 'stories260K', prompt, max_tokens: 48, temperature: 0.9, seed: 5 })).choices[0]?.text;
    expect(await sampled()).toBe(await sampled());

    const health = (await (await fetch(new URL('/health', ring.url))).json()) as { speculative?: { accepted: number; drafted: number; verify_steps: number; mode: number } };
    expect(health.speculative).toMatchObject({ mode: 4 });
    expect(health.speculative!.accepted).toBeGreaterThan(0);
    expect(health.speculative!.verify_steps).toBeGreaterThan(0);
  }, 240_000);

  it('keeps the greedy tokens across a recovery: a member killed mid-stream while drafts are verified', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['--speculative', '4']);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused', maxRetries: 0 });
    const prompt = 'Once upon a time, there was a little girl named Lily. She liked to play outside. Once upon a time, there was a little girl named';
    const reference = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '160');
    // bob is killed after the 12th streamed piece (a piece is one verify step's accepted tokens).
    const stream = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 160, temperature: 0, stream: true });
    let text = '';
    let pieces = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (++pieces === 12) ring.members.get('bob')!.child.kill('SIGKILL');
    }
    expect(text).toBe(reference.text);
    const recovered = await waitEvent(ring.host, (e) => e.event === 'recovered', 'the recovery');
    expect(recovered.resumed_requests as number).toBeGreaterThanOrEqual(1);
    const health = (await (await fetch(new URL('/health', ring.url))).json()) as { speculative?: { accepted: number } };
    expect(health.speculative!.accepted).toBeGreaterThan(0);
    // The ring after the recovery still speculates and stays exact.
    const after = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 160, temperature: 0 });
    expect(after.choices[0]?.text).toBe(reference.text);
  }, 240_000);

  it('drafts with --draft-model on the host (the model as its own draft model): free prose is drafted and the tokens stay the same', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['--draft-model', model, '--speculative', '3']);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    // No repeated text: prompt lookup would find nothing to draft here.
    const prompt = 'The little dog ran to the';
    const reference = await kiwiJson('generate', '--model', model, '--prompt', prompt, '--max-tokens', '48');
    const completion = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 48, temperature: 0 });
    expect(completion.choices[0]?.text).toBe(reference.text);
    const health = (await (await fetch(new URL('/health', ring.url))).json()) as { speculative?: { drafter: string; accepted: number; drafted: number } };
    expect(health.speculative).toMatchObject({ drafter: 'draft-model' });
    expect(health.speculative!.accepted / health.speculative!.drafted).toBeGreaterThan(0.8);
  }, 240_000);
});
