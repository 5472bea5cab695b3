// Client conformance: the real clients people point at Kiwi, from the npm registry (the official
// `openai` SDK, the Vercel AI SDK with @ai-sdk/openai-compatible, LangChain JS) and the Python
// `openai` SDK where this machine's python has it, against `kiwi serve` on stories260K and against
// a 3-process ring (host + two members). Chat and completions streaming and not, logprobs, n > 1,
// many stops, max_tokens beyond the context, embeddings and the Responses API (create and stream);
// with LangChain also bindTools and withStructuredOutput (tool calling's own suite is server/tools).
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { embedMany, generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { z } from 'zod';
import { testModelPath } from '../model/test-models.js';
import { isolatedCacheDir, ProcessSet, type Proc, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-clients-');
afterAll(() => procs.dispose());

const MODEL = 'stories260K';
const PROMPT = 'Once upon a time';

interface Target {
  url: string;
  /** The process that serves the API (it prints the --log-requests lines). */
  api: Proc;
}

async function startServe(model: string): Promise<Target> {
  const p = procs.kiwi('serve', '--model', model, '--port', '0', '--threads', '1', '--log-requests', '--json');
  return { url: (await waitEvent(p, (e) => e.event === 'serving', 'kiwi serve', 60_000)).url as string, api: p };
}

/** rendezvous + host + two members, as pipeline/ring.process.test.ts starts them. */
async function startRing(model: string): Promise<Target> {
  const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--log-requests', '--json');
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json');
  procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json');
  return { url: (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 90_000)).url as string, api: host };
}

/** Whether this machine's python3 can import the openai package (PyPI is not reachable; a local wheel may be installed). */
async function pythonHasOpenAi(): Promise<boolean> {
  try {
    await run('python3', ['-c', 'import openai']);
    return true;
  } catch {
    return false;
  }
}
const havePython = await pythonHasOpenAi();

describe.each([
  ['kiwi serve', startServe],
  ['a 3-process ring', startRing],
] as const)('real clients against %s', (_name, start) => {
  let url = '';
  let api: Proc;
  let client: OpenAI;
  let greedyText = '';
  beforeAll(async () => {
    ({ url, api } = await start(await testModelPath('stories260K.gguf')));
    client = new OpenAI({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 24, temperature: 0 });
    greedyText = r.choices[0]!.message.content ?? '';
  }, 120_000);
  afterAll(() => procs.killAll());

  describe('the openai SDK', () => {
    test('chat streaming gives exactly the text of the non-streaming call, then usage', async () => {
      const s = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 24,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = '';
      let usage: OpenAI.CompletionUsage | undefined | null;
      for await (const chunk of s) {
        text += chunk.choices[0]?.delta.content ?? '';
        usage = chunk.usage ?? usage;
      }
      expect(text).toBe(greedyText);
      expect(usage?.completion_tokens).toBeGreaterThan(0);
    });

    test('logprobs and n > 1', async () => {
      const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
      const content = r.choices[0]!.logprobs!.content!;
      expect(content.map((c) => c.token).join('')).toBe(r.choices[0]!.message.content);
      expect(content.every((c) => c.top_logprobs.length === 2 && c.logprob <= 0)).toBe(true);
      const c = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 6, temperature: 0.9, seed: 4, n: 3, logprobs: 1 });
      expect(c.choices.map((x) => x.index)).toEqual([0, 1, 2]);
      expect(c.choices.every((x) => (x.logprobs?.tokens?.length ?? 0) > 0)).toBe(true);
    });

    test('six stop sequences (Continue sends five or more) end the text before the first that appears', async () => {
      const stop = greedyText.slice(8, 12);
      const r = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 24,
        temperature: 0,
        stop: ['<fim1>', '<fim2>', '\n\n\n', '```', 'zzzz', stop],
      });
      expect(r.choices[0]!.message.content).toBe(greedyText.slice(0, greedyText.indexOf(stop)));
      expect(r.choices[0]!.finish_reason).toBe('stop');
    });

    test('max_tokens beyond the context ends at the context with finish_reason length', async () => {
      const models = await client.models.list();
      const context = (models.data[0] as unknown as { context_length: number }).context_length;
      expect(context).toBeGreaterThan(0);
      const ids = (await (await fetch(url.replace(/\/v1$/, '/tokenize'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: 'the cat' }) })).json()) as {
        tokens: number[];
      };
      const prompt = Array.from({ length: context - 3 }, (_, i) => ids.tokens[i % ids.tokens.length]!);
      const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 4096, temperature: 0, logit_bias: { '2': -100 } });
      expect(r.choices[0]!.finish_reason).toBe('length');
      expect(r.usage!.total_tokens).toBe(context);
    });

    test('embeddings (the SDK asks for base64 and decodes it)', async () => {
      const r = await client.embeddings.create({ model: MODEL, input: [PROMPT, 'The cat sat'] });
      expect(r.data).toHaveLength(2);
      expect(r.data[0]!.embedding).toHaveLength(64);
      expect(Math.hypot(...r.data[0]!.embedding)).toBeCloseTo(1, 4);
      const f = await client.embeddings.create({ model: MODEL, input: PROMPT, encoding_format: 'float' });
      expect(f.data[0]!.embedding).toEqual(r.data[0]!.embedding);
    });

    test('the Responses API: create, stream and a function tool', async () => {
      const created = await client.responses.create({ model: MODEL, input: PROMPT, max_output_tokens: 24, temperature: 0 });
      expect(created.output_text).toBe(greedyText);
      const stream = client.responses.stream({ model: MODEL, instructions: undefined, input: [{ role: 'user', content: PROMPT }], max_output_tokens: 24, temperature: 0 });
      let deltas = '';
      stream.on('response.output_text.delta', (e) => (deltas += e.delta));
      const final = await stream.finalResponse();
      expect(deltas).toBe(greedyText);
      expect(final.output_text).toBe(greedyText);
      expect(final.usage?.output_tokens).toBe(24);
      const city = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'], additionalProperties: false };
      const called = await client.responses.create({
        model: MODEL,
        input: 'Weather in Paris?',
        tools: [{ type: 'function', name: 'get_weather', parameters: city, strict: true }],
        tool_choice: { type: 'function', name: 'get_weather' },
        max_output_tokens: 200,
      });
      const call = called.output.find((o) => o.type === 'function_call');
      expect(call).toMatchObject({ type: 'function_call', name: 'get_weather' });
      expect(['Paris', 'Rome']).toContain(JSON.parse((call as { arguments: string }).arguments).city);
    });
  });

  test('--log-requests printed one line per request with its status and tokens', async () => {
    const line = await waitEvent(api, (e) => e.event === 'request' && e.path === '/v1/chat/completions', 'a request line');
    expect(line).toMatchObject({ method: 'POST', status: 200, tokens: 24 });
  });

  describe('the Vercel AI SDK', () => {
    test('generateText, streamText and embedMany', async () => {
      const provider = createOpenAICompatible({ name: 'kiwi', baseURL: url, apiKey: 'unused' });
      const g = await generateText({ model: provider.chatModel(MODEL), prompt: PROMPT, maxOutputTokens: 24, temperature: 0, maxRetries: 0 });
      expect(g.text).toBe(greedyText);
      const s = streamText({ model: provider.chatModel(MODEL), prompt: PROMPT, maxOutputTokens: 24, temperature: 0, maxRetries: 0 });
      let text = '';
      for await (const part of s.textStream) text += part;
      expect(text).toBe(greedyText);
      const e = await embedMany({ model: provider.embeddingModel(MODEL), values: [PROMPT, 'The cat sat'], maxRetries: 0 });
      expect(e.embeddings).toHaveLength(2);
      expect(e.embeddings[0]).toHaveLength(64);
    });
  });

  describe('LangChain JS', () => {
    const chat = (extra: Record<string, unknown> = {}) =>
      new ChatOpenAI({ model: MODEL, apiKey: 'unused', configuration: { baseURL: url }, temperature: 0, maxTokens: 24, maxRetries: 0, ...extra });

    test('invoke, stream and logprobs', async () => {
      const m = await chat().invoke(PROMPT);
      expect(m.content).toBe(greedyText);
      let text = '';
      for await (const chunk of await chat().stream(PROMPT)) text += chunk.content as string;
      expect(text).toBe(greedyText);
      const withLogprobs = await chat({ logprobs: true, topLogprobs: 2 }).invoke(PROMPT);
      const content = (withLogprobs.response_metadata.logprobs as { content: Array<{ token: string }> }).content;
      expect(content.map((c) => c.token).join('')).toBe(greedyText);
    });

    test('bindTools with a named tool_choice and withStructuredOutput (tool calling and constrained decoding, server/tools)', async () => {
      const weather = tool(async ({ city }) => `sunny in ${city}`, { name: 'get_weather', description: 'The weather of a city', schema: z.object({ city: z.string() }) });
      const m = await chat({ maxTokens: 400 }).bindTools([weather], { tool_choice: 'get_weather' }).invoke('What is the weather in Paris?');
      expect(m.tool_calls).toHaveLength(1);
      expect(m.tool_calls![0]).toMatchObject({ name: 'get_weather', args: { city: expect.any(String) } });
      const person = z.object({ name: z.string(), age: z.number() });
      for (const method of ['jsonSchema', 'functionCalling'] as const) {
        const out = await chat({ maxTokens: 400 }).withStructuredOutput(person, { method }).invoke('Describe a person');
        expect(person.safeParse(out).success).toBe(true);
      }
    });

    test('the Responses API and embeddings', async () => {
      const r = await chat({ useResponsesApi: true }).invoke(PROMPT);
      expect(r.text).toBe(greedyText);
      const emb = new OpenAIEmbeddings({ model: MODEL, apiKey: 'unused', configuration: { baseURL: url }, maxRetries: 0 });
      const v = await emb.embedQuery(PROMPT);
      expect(v).toHaveLength(64);
    });
  });

  describe('the Python openai SDK', () => {
    test.skipIf(!havePython)('chat, streaming, embeddings and responses (skipped where python3 cannot import openai: pip install --no-index openai)', async () => {
      const script = join(tempDir(), 'client.py');
      await writeFile(
        script,
        [
          'import json, sys',
          'from openai import OpenAI',
          "c = OpenAI(base_url=sys.argv[1], api_key='unused', max_retries=0)",
          `msgs = [{'role': 'user', 'content': ${JSON.stringify(PROMPT)}}]`,
          `chat = c.chat.completions.create(model='${MODEL}', messages=msgs, max_tokens=24, temperature=0, logprobs=True, top_logprobs=2)`,
          `streamed = ''.join((ch.choices[0].delta.content or '') for ch in c.chat.completions.create(model='${MODEL}', messages=msgs, max_tokens=24, temperature=0, stream=True) if ch.choices)`,
          `emb = c.embeddings.create(model='${MODEL}', input=['a', 'b'])`,
          `resp = c.responses.create(model='${MODEL}', input=${JSON.stringify(PROMPT)}, max_output_tokens=24, temperature=0)`,
          "print(json.dumps({'chat': chat.choices[0].message.content, 'tokens': len(chat.choices[0].logprobs.content), 'streamed': streamed, 'dims': len(emb.data[0].embedding), 'responses': resp.output_text}))",
        ].join('\n'),
      );
      const { stdout } = await run('python3', [script, url], { timeout: 120_000 });
      const out = JSON.parse(stdout.trim()) as Record<string, unknown>;
      expect(out).toMatchObject({ chat: greedyText, streamed: greedyText, dims: 64, responses: greedyText });
      expect(out.tokens as number).toBeGreaterThan(0);
    });
  });
});
