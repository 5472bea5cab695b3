import { describe, expect, test } from 'vitest';
import { KiwiError } from '../../errors.js';
import { acceptsText } from '../../runtime/constrained/json-automaton.js';
import { ChatToolOutput, chatGrammar, planChatTools } from './chat-tools.js';

const weather = { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'], additionalProperties: false } } };
const time = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: {}, additionalProperties: false } } };

function refusal(f: () => unknown): KiwiError {
  try {
    f();
  } catch (e) {
    if (e instanceof KiwiError) return e;
    throw e;
  }
  throw new Error('nothing was refused');
}

describe('planChatTools and chatGrammar', () => {
  test('tools without tool_choice are offered and parsed (auto), nothing forced', () => {
    expect(planChatTools({ tools: [weather] })).toMatchObject({ parse: true, forced: undefined, parallel: true });
    expect(planChatTools({ tools: [weather], tool_choice: 'none' })).toMatchObject({ offered: [], parse: false });
  });

  test('required forces one call to any tool, in the family syntax', () => {
    const plan = planChatTools({ tools: [weather, time], tool_choice: 'required' });
    const hermes = chatGrammar({}, plan, 'hermes')!;
    expect(acceptsText(hermes, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')).toBe(true);
    expect(acceptsText(hermes, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')).toBe(true);
    expect(acceptsText(hermes, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')).toBe(false);
    expect(acceptsText(chatGrammar({}, plan, 'llama3')!, '{"name": "get_time", "parameters": {}}')).toBe(true);
    expect(acceptsText(chatGrammar({}, plan, 'mistral')!, '[{"name": "get_time", "arguments": {}}]')).toBe(true);
  });

  test('a named choice forces that function only', () => {
    const g = chatGrammar({}, planChatTools({ tools: [weather, time], tool_choice: { type: 'function', function: { name: 'get_time' } } }), 'generic')!;
    expect(acceptsText(g, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')).toBe(true);
    expect(acceptsText(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')).toBe(false);
  });

  test('the same schema compiles once (the cache hands back the same grammar)', () => {
    const body = { response_format: { type: 'json_schema' as const, json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } } } } } };
    const plan = planChatTools({});
    expect(chatGrammar(body, plan, 'generic')).toBe(chatGrammar(structuredClone(body), plan, 'generic'));
    expect(chatGrammar({ response_format: { type: 'text' } }, plan, 'generic')).toBeUndefined();
  });

  test.each([
    [{ tool_choice: 'required' as const }, 'tool_choice'],
    [{ tools: [weather], tool_choice: { type: 'function' as const, function: { name: 'nope' } } }, 'tool_choice'],
    [{ tools: [weather, weather] }, 'tools'],
    [{ tools: [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'x' } } } } }], tool_choice: 'required' as const }, 'tools'],
  ])('refuses %j with a 400 naming %s', (body, param) => {
    const err = refusal(() => planChatTools(body));
    expect(err.code).toBe('API_BAD_REQUEST');
    expect(err.details.param).toBe(param);
  });

  test('response_format together with a forced call is refused', () => {
    const err = refusal(() => chatGrammar({ response_format: { type: 'json_object' } }, planChatTools({ tools: [weather], tool_choice: 'required' }), 'hermes'));
    expect(err.details.param).toBe('response_format');
  });
});

describe('ChatToolOutput', () => {
  const two = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';

  test('gives calls with ids, content null, finish_reason tool_calls', () => {
    const out = new ChatToolOutput(planChatTools({ tools: [weather, time] }), 'hermes');
    out.push(two);
    out.finish();
    const m = out.message();
    expect(m.content).toBeNull();
    expect(m.tool_calls!.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ['get_time', '{}'],
      ['get_weather', '{"city":"Oslo"}'],
    ]);
    expect(new Set(m.tool_calls!.map((c) => c.id)).size).toBe(2);
    expect(out.finishReason('stop')).toBe('tool_calls');
  });

  test('parallel_tool_calls false keeps only the first call', () => {
    const out = new ChatToolOutput(planChatTools({ tools: [weather, time], parallel_tool_calls: false }), 'hermes');
    out.push(two);
    out.finish();
    expect(out.message().tool_calls!.map((c) => c.function.name)).toEqual(['get_time']);
  });

  test('streams each call as delta.tool_calls: index, id, type and name, then the arguments', () => {
    const out = new ChatToolOutput(planChatTools({ tools: [weather, time] }), 'hermes');
    const d = out.push(two);
    const deltas = out.deltas(d.calls);
    expect(deltas).toEqual([
      { tool_calls: [{ index: 0, id: out.calls[0]!.id, type: 'function', function: { name: 'get_time', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
      { tool_calls: [{ index: 1, id: out.calls[1]!.id, type: 'function', function: { name: 'get_weather', arguments: '' } }] },
      { tool_calls: [{ index: 1, function: { arguments: '{"city":"Oslo"}' } }] },
    ]);
    expect(out.calls[0]!.id).toMatch(/^call_[0-9a-f]{24}$/);
  });

  test('without tools the text passes through untouched, tags and all', () => {
    const out = new ChatToolOutput(planChatTools({}), 'hermes');
    expect(out.push(two).content).toBe(two);
    expect(out.message()).toEqual({ role: 'assistant', content: two });
    expect(out.finishReason('length')).toBe('length');
  });
});
