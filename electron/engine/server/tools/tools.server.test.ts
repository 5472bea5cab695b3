// Tool calling and structured output end to end, through the real clients: the official `openai`
// SDK (tool_choice required and named, streaming and not; a tool-result round trip;
// chat.completions.parse with zodResponseFormat) and the Vercel AI SDK (generateText with a required
// tool, and Output.object), against a real server on loopback serving stories260K. A 260K-parameter
// model cannot choose to call a tool; constrained decoding makes its forced calls valid anyway.
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, Output, tool } from 'ai';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { z } from 'zod';
import { testModelPath } from '../../model/test-models.js';
import { startOpenAiServer, type OpenAiServer } from '../http-server.js';
import { LocalBackend } from '../local-backend.js';

const weatherArgs = z.object({ city: z.enum(['Paris', 'Oslo', 'Lima']), days: z.number().int(), metric: z.boolean() }).strict();
const weatherTool = {
  type: 'function' as const,
  function: { name: 'get_weather', description: 'Weather forecast for a city', parameters: z.toJSONSchema(weatherArgs) as Record<string, unknown> },
};
const timeTool = {
  type: 'function' as const,
  function: { name: 'get_time', description: 'The time in a zone', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false } },
};

let backend: LocalBackend;
let server: OpenAiServer;
let client: OpenAI;

beforeAll(async () => {
  backend = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1 });
  server = await startOpenAiServer(backend, { port: 0 });
  client = new OpenAI({ baseURL: server.url, apiKey: 'none', maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
  await backend?.close();
});

const user = { role: 'user' as const, content: 'What is the weather in Paris?' };

describe('the openai SDK', () => {
  test('tool_choice required gives a call whose arguments validate against the schema', async () => {
    const r = await client.chat.completions.create({ model: 'stories260K', messages: [user], tools: [weatherTool, timeTool], tool_choice: 'required', max_tokens: 400 });
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    const calls = choice.message.tool_calls!;
    expect(calls).toHaveLength(1);
    const call = calls[0]!;
    expect(call.type).toBe('function');
    if (call.type !== 'function') throw new Error('not a function call');
    expect(call.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(['get_weather', 'get_time']).toContain(call.function.name);
    const args: unknown = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') weatherArgs.parse(args);
    else expect(args).toEqual({ zone: expect.stringMatching(/^(UTC|CET)$/) });
    expect(choice.message.content).toBeNull();
  });

  test('a named tool_choice streams delta.tool_calls: id, type and name first, then the arguments', async () => {
    const stream = await client.chat.completions.create({
      model: 'stories260K',
      messages: [user],
      tools: [weatherTool, timeTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      stream: true,
      max_tokens: 400,
    });
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    let content = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c === undefined) continue;
      deltas.push(...(c.delta.tool_calls ?? []));
      content += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(content).toBe('');
    expect(deltas[0]).toMatchObject({ index: 0, id: expect.stringMatching(/^call_/), type: 'function', function: { name: 'get_weather' } });
    const args = deltas.map((d) => d.function?.arguments ?? '').join('');
    weatherArgs.parse(JSON.parse(args));
    expect(new Set(deltas.map((d) => d.index))).toEqual(new Set([0]));
  });

  test('a tool result goes back as a tool_response turn, not as the assistant, and the next call is valid again', async () => {
    const first = await client.chat.completions.create({ model: 'stories260K', messages: [user], tools: [weatherTool], tool_choice: 'required', max_tokens: 400 });
    const call = first.choices[0]!.message.tool_calls![0]!;
    if (call.type !== 'function') throw new Error('not a function call');
    const history: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      user,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' },
    ];
    const prompt = backend.prepare({
      kind: 'chat',
      messages: [
        { role: 'user', content: user.content },
        { role: 'assistant', content: '', tool_calls: [call] },
        { role: 'tool', content: '{"temperature": 21}', tool_call_id: call.id },
      ],
    });
    expect(prompt.text).toContain(`User: <tool_response>\n{"temperature": 21}\n</tool_response>\n`);
    expect(prompt.text).toContain(`Assistant: <tool_call>\n{"name": "get_weather", "arguments": ${call.function.arguments}}\n</tool_call>\n`);
    const next = await client.chat.completions.create({ model: 'stories260K', messages: history, tools: [weatherTool], tool_choice: 'required', max_tokens: 400 });
    const again = next.choices[0]!.message.tool_calls![0]!;
    if (again.type !== 'function') throw new Error('not a function call');
    weatherArgs.parse(JSON.parse(again.function.arguments));
    const plain = await client.chat.completions.create({ model: 'stories260K', messages: history, tools: [weatherTool], tool_choice: 'none', max_tokens: 8 });
    expect(plain.choices[0]!.message.tool_calls ?? []).toEqual([]);
  });

  test('tool_choice auto lets a model that does not call a tool answer in text', async () => {
    const r = await client.chat.completions.create({ model: 'stories260K', messages: [user], tools: [weatherTool], max_tokens: 16, temperature: 0 });
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(['stop', 'length']).toContain(r.choices[0]!.finish_reason);
  });

  test('chat.completions.parse with zodResponseFormat returns an object that validates', async () => {
    const Forecast = z.object({ city: z.enum(['Paris', 'Oslo']), days: z.number().int(), sunny: z.boolean(), hours: z.array(z.number().int()).max(3) });
    const r = await client.chat.completions.parse({ model: 'stories260K', messages: [user], response_format: zodResponseFormat(Forecast, 'forecast'), max_tokens: 400 });
    const parsed = r.choices[0]!.message.parsed;
    expect(parsed).not.toBeNull();
    Forecast.parse(parsed);
    expect(r.choices[0]!.finish_reason).toBe('stop');
  });

  test('json_object gives a JSON object', async () => {
    const r = await client.chat.completions.create({ model: 'stories260K', messages: [user], response_format: { type: 'json_object' }, max_tokens: 400, seed: 3, temperature: 0 });
    if (r.choices[0]!.finish_reason === 'stop') expect(typeof JSON.parse(r.choices[0]!.message.content!)).toBe('object');
    else expect(r.choices[0]!.message.content!.startsWith('{')).toBe(true); // cut off by max_tokens inside a string
  });

  test('a schema keyword the grammar cannot enforce is a 400 naming it', async () => {
    const err = await client.chat.completions
      .create({ model: 'stories260K', messages: [user], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a+$' } } } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("'pattern'");
  });

  test('a named tool_choice that is not among the tools is a 400', async () => {
    const err = await client.chat.completions.create({ model: 'stories260K', messages: [user], tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'nope' } } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  });
});

describe('the Vercel AI SDK', () => {
  const provider = () => createOpenAICompatible({ name: 'kiwi', baseURL: server.url, supportsStructuredOutputs: true });

  test('generateText with a required tool gets a typed tool call', async () => {
    const r = await generateText({
      model: provider().chatModel('stories260K'),
      prompt: 'Weather in Oslo?',
      tools: { get_weather: tool({ description: 'Weather forecast', inputSchema: weatherArgs }) },
      toolChoice: 'required',
      maxOutputTokens: 400,
    });
    expect(r.finishReason).toBe('tool-calls');
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0]!.toolName).toBe('get_weather');
    weatherArgs.parse(r.toolCalls[0]!.input);
  });

  test('Output.object gives an object of the schema', async () => {
    const schema = z.object({ name: z.enum(['Lily', 'Tom']), age: z.number().int(), happy: z.boolean() });
    const r = await generateText({ model: provider().chatModel('stories260K'), prompt: 'Describe a child.', output: Output.object({ schema }), maxOutputTokens: 400 });
    schema.parse(r.output);
  });
});
