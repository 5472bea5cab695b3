// Constrained decoding through a 3-process ring (host + two members on loopback): the ring's head
// applies the grammar mask, so response_format json_schema and a required tool call come out valid,
// and greedy, exactly as from a model in one process.
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { testModelPath } from '../model/test-models.js';
import { startOpenAiServer } from '../server/http-server.js';
import { LocalBackend } from '../server/local-backend.js';
import { ProcessSet, type Proc, waitEvent } from '../test-support/processes.js';

const procs = new ProcessSet();
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());
const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function startRing(model: string): Promise<string> {
  const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json');
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json');
  kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json');
  return (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000)).url as string;
}

const Forecast = z.object({ city: z.enum(['Paris', 'Oslo']), days: z.number().int(), sunny: z.boolean() });
const weatherArgs = z.object({ city: z.enum(['Paris', 'Oslo', 'Lima']), metric: z.boolean() }).strict();
const tools = [{ type: 'function' as const, function: { name: 'get_weather', parameters: z.toJSONSchema(weatherArgs) as Record<string, unknown> } }];
const messages = [{ role: 'user' as const, content: 'Weather in Paris?' }];

describe('constrained decoding through the ring', () => {
  it('gives a valid json_schema object and a valid required tool call, the same as one process', async () => {
    const path = await testModelPath('stories260K.gguf');
    const ring = new OpenAI({ baseURL: await startRing(path), apiKey: 'unused', maxRetries: 0 });
    const backend = await LocalBackend.open(path, { threads: 1 });
    const server = await startOpenAiServer(backend, { port: 0 });
    try {
      const local = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
      const structured = { model: 'stories260K', messages, response_format: zodResponseFormat(Forecast, 'forecast'), max_tokens: 300, temperature: 0 };
      const viaRing = await ring.chat.completions.parse(structured);
      Forecast.parse(viaRing.choices[0]!.message.parsed);
      expect(viaRing.choices[0]!.message.content).toBe((await local.chat.completions.parse(structured)).choices[0]!.message.content);

      const call = { model: 'stories260K', messages, tools, tool_choice: 'required' as const, max_tokens: 300, temperature: 0, stream: true as const };
      let args = '';
      let name = '';
      let finish: string | null = null;
      for await (const chunk of await ring.chat.completions.create(call)) {
        for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
          name += d.function?.name ?? '';
          args += d.function?.arguments ?? '';
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(finish).toBe('tool_calls');
      expect(name).toBe('get_weather');
      weatherArgs.parse(JSON.parse(args));
      const localCall = await local.chat.completions.create({ ...call, stream: false });
      const fn = localCall.choices[0]!.message.tool_calls![0]!;
      expect(fn.type === 'function' ? fn.function.arguments : undefined).toBe(args);
    } finally {
      await server.close();
      await backend.close();
    }
  });
});
