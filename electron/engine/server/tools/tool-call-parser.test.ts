import { describe, expect, test } from 'vitest';
import { createToolCallParser, type ParsedPiece } from './tool-call-parser.js';
import type { ToolSyntax } from '../../completion/tool-syntax.js';

function parseIn(syntax: ToolSyntax, pieces: readonly string[]): ParsedPiece {
  const p = createToolCallParser(syntax);
  const out: ParsedPiece = { content: '', calls: [] };
  for (const piece of [...pieces.map((x) => p.push(x)), p.finish()]) {
    out.content += piece.content;
    out.calls.push(...piece.calls);
  }
  return out;
}

const weather = { name: 'get_weather', arguments: '{"city":"Paris","days":2}' };
const time = { name: 'get_time', arguments: '{"zone":"UTC"}' };

const CASES: [ToolSyntax, string, ParsedPiece][] = [
  ['hermes', 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>', { content: 'Sure.\n', calls: [weather] }],
  ['hermes', '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>', { content: '\n', calls: [weather, time] }],
  ['hermes', '<tool_call>{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}', { content: '', calls: [time] }], // arguments as a string; cut off before the closing tag
  ['hermes', 'a < b and <tool_ is not a tag', { content: 'a < b and <tool_ is not a tag', calls: [] }],
  ['hermes', '<tool_call>not json</tool_call> ok', { content: '<tool_call>not json</tool_call> ok', calls: [] }],
  ['generic', 'x<tool_call>{"name":"get_time","arguments":{"zone":"UTC"}}</tool_call>', { content: 'x', calls: [time] }],
  ['llama3', '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', { content: '', calls: [weather] }],
  ['llama3', '  <|python_tag|>{"name": "get_time", "parameters": {"zone": "UTC"}}; {"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', { content: '', calls: [time, weather] }],
  ['llama3', 'The weather is {fine}.', { content: 'The weather is {fine}.', calls: [] }],
  ['llama3', '{not a call}', { content: '{not a call}', calls: [] }],
  ['mistral', '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, {"name": "get_time", "arguments": {"zone": "UTC"}}]', { content: '', calls: [weather, time] }],
  ['mistral', '[{"name": "get_time", "arguments": {"zone": "UTC"}}]', { content: '', calls: [time] }],
  ['mistral', '[1] is a citation', { content: '[1] is a citation', calls: [] }],
];

describe('tool-call parsers', () => {
  test.each(CASES)('%s: %j', (syntax, text, expected) => {
    expect(parseIn(syntax, [text])).toEqual(expected);
  });

  test.each(CASES)('%s gives the same result split at every character boundary: %j', (syntax, text, expected) => {
    for (let i = 0; i <= text.length; i++) {
      for (const j of [i, Math.min(text.length, i + 1), Math.min(text.length, i + 7)]) {
        expect(parseIn(syntax, [text.slice(0, i), text.slice(i, j), text.slice(j)])).toEqual(expected);
      }
    }
    expect(parseIn(syntax, [...text])).toEqual(expected);
  });

  test('plain text streams at once; only a possible tag is held back', () => {
    const p = createToolCallParser('hermes');
    expect(p.push('Hello <tool')).toEqual({ content: 'Hello ', calls: [] });
    expect(p.push('box>')).toEqual({ content: '<toolbox>', calls: [] });
    const l = createToolCallParser('llama3');
    expect(l.push('Hi')).toEqual({ content: 'Hi', calls: [] });
  });
});
