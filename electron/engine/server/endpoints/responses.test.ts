// POST /v1/responses in-process against stories260K: the same generation as chat, its stream's
// numbered events, stateful parameters refused, function tools and text.format.
import { describe, expect, test } from 'vitest';
import { withStoriesApi } from '../test-helpers.js';

const { call } = withStoriesApi();


describe('the Responses API', () => {
  test('create: instructions and input items become the chat prompt; the output is one message', async () => {
    const body = { instructions: 'Tell a story.', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }], max_output_tokens: 6, temperature: 0 };
    const r = await call('POST', '/v1/responses', body);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ object: 'response', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 6 } });
    const viaChat = await call('POST', '/v1/chat/completions', {
      messages: [
        { role: 'system', content: 'Tell a story.' },
        { role: 'user', content: 'Once upon a time' },
      ],
      max_tokens: 6,
      temperature: 0,
    });
    expect(r.json.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(r.json.output[0].content[0]).toMatchObject({ type: 'output_text', text: viaChat.json.choices[0].message.content });
  });

  test('stream: created, deltas, done events and completed, numbered in order', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Once upon a time', max_output_tokens: 5, temperature: 0, stream: true });
    const events = r.text
      .split('\n\n')
      .filter((b) => b.trim() !== '')
      .map((b) => {
        const [name, data] = b.split('\n') as [string, string];
        const json = JSON.parse(data.slice('data: '.length));
        expect(name).toBe(`event: ${json.type}`);
        return json;
      });
    const types = events.map((e: any) => e.type);
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    expect(events.map((e: any) => e.sequence_number)).toEqual(events.map((_: unknown, i: number) => i));
    const deltas = events.filter((e: any) => e.type === 'response.output_text.delta').map((e: any) => e.delta).join('');
    expect(events.at(-1).response.output[0].content[0].text).toBe(deltas);
  });

  test('stateful parameters are refused by name', async () => {
    expect((await call('POST', '/v1/responses', { input: 'x', previous_response_id: 'resp_1' })).json.error.param).toBe('previous_response_id');
    expect((await call('POST', '/v1/responses', { input: 'x', tools: [{ type: 'web_search' }] })).json.error.param).toBe('tools.0.type');
  });

  const weather = { type: 'function', name: 'get_weather', description: 'The weather of a city', parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] } };

  test('function tools: a named tool_choice gives a function_call item whose arguments follow the schema', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Weather in Paris?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200 });
    expect(r.status).toBe(200);
    const calls = r.json.output.filter((o: any) => o.type === 'function_call');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: 'get_weather', status: 'completed', call_id: expect.stringMatching(/^call_/) });
    expect(typeof JSON.parse(calls[0].arguments).city).toBe('string');
    expect(r.json.status).toBe('completed');
  });

  test('function tools stream as output_item and function_call_arguments events', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Weather?', tools: [weather], tool_choice: 'required', max_output_tokens: 200, stream: true });
    const events = r.text
      .split('\n\n')
      .filter((b) => b.trim() !== '')
      .map((b) => JSON.parse(b.split('\n')[1]!.slice('data: '.length)));
    const done = events.find((e: any) => e.type === 'response.function_call_arguments.done');
    expect(done).toMatchObject({ name: 'get_weather' });
    const completed = events.at(-1);
    expect(completed.type).toBe('response.completed');
    expect(completed.response.output.find((o: any) => o.type === 'function_call').arguments).toBe(done.arguments);
  });

  test('a function_call and its output in the input are rendered as the tool round trip', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ];
    const r = await call('POST', '/v1/responses', { input, tools: [weather], tool_choice: 'none', max_output_tokens: 4, temperature: 0 });
    expect(r.status).toBe(200);
    const viaChat = await call('POST', '/v1/chat/completions', {
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ],
      tools: [{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } }],
      tool_choice: 'none',
      max_tokens: 4,
      temperature: 0,
    });
    expect(r.json.output[0].content[0].text).toBe(viaChat.json.choices[0].message.content);
  });

  test('text.format json_schema constrains the output to the schema', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', enum: ['Ada', 'Bob'] } }, required: ['name'], additionalProperties: false };
    const r = await call('POST', '/v1/responses', { input: 'A name', text: { format: { type: 'json_schema', name: 'person', schema, strict: true } }, max_output_tokens: 100 });
    expect(Object.keys(JSON.parse(r.json.output[0].content[0].text))).toEqual(['name']);
  });
});
