// How a model family writes a tool call, picked from its chat template as llama-server does:
// Qwen/Hermes `<tool_call>{"name":..,"arguments":..}</tool_call>`, Llama 3.x a bare JSON object
// `{"name":..,"parameters":..}` (after `<|python_tag|>`), Mistral `[TOOL_CALLS][{..}]`, and a generic
// syntax (Hermes tags, explained in the system prompt) for templates that know nothing of tools.
// Also the grammar that forces a call in that syntax (tool_choice required / named). Pure.
import type { GrammarItem } from '../runtime/constrained/json-automaton.js';
import type { Shape } from '../runtime/constrained/json-schema-shape.js';
import { compileJsonSchema, objectShape, addLiteral, newLitNode } from '../runtime/constrained/json-schema-shape.js';

export type ToolSyntax = 'hermes' | 'llama3' | 'mistral' | 'generic';

export interface ToolFunction {
  name: string;
  description?: string | undefined;
  /** JSON schema of the arguments object. */
  parameters?: Record<string, unknown> | undefined;
}

/** Whether a chat template renders a `tools` variable at all. */
export function templateSupportsTools(template: string): boolean {
  return /\btools\b/.test(template);
}

/** The call syntax a chat template teaches its model. */
export function toolSyntaxOf(template: string): ToolSyntax {
  if (!templateSupportsTools(template)) return 'generic';
  if (template.includes('<tool_call>')) return 'hermes';
  if (template.includes('[TOOL_CALLS]')) return 'mistral';
  if (template.includes('<|python_tag|>') || (template.includes('<|start_header_id|>') && template.includes('parameters'))) return 'llama3';
  return 'generic';
}

/** The key a family puts the arguments under. */
export function argumentsKey(syntax: ToolSyntax): 'arguments' | 'parameters' {
  return syntax === 'llama3' ? 'parameters' : 'arguments';
}

function literal(text: string): Shape {
  const trie = newLitNode();
  addLiteral(trie, text, 0);
  return { k: 'literal', trie };
}

/** The object of one call to `fn`: `{"name": "<fn>", "<arguments key>": <its parameters>}`. */
function callShape(fn: ToolFunction, syntax: ToolSyntax): Shape {
  const params = compileJsonSchema(fn.parameters ?? { type: 'object', properties: {} }, 'tools');
  return objectShape(
    [
      { key: 'name', shape: literal(JSON.stringify(fn.name)), required: true },
      { key: argumentsKey(syntax), shape: params, required: true },
    ],
    undefined,
  );
}

/**
 * The grammar of exactly one call to one of `fns`, written in `syntax`; the generation ends after it.
 * Control-token triggers (`<|python_tag|>`, `[TOOL_CALLS]`) are left out: the mask never allows a
 * control token, and the parser accepts a call without them.
 */
export function forcedCallGrammar(fns: readonly ToolFunction[], syntax: ToolSyntax): GrammarItem[] {
  const alts = fns.map((fn) => callShape(fn, syntax));
  const call: Shape = alts.length === 1 ? alts[0]! : { k: 'anyOf', alts };
  switch (syntax) {
    case 'hermes':
    case 'generic':
      return [{ literal: '<tool_call>\n' }, { value: call }, { literal: '\n</tool_call>' }];
    case 'llama3':
      return [{ value: call }];
    case 'mistral':
      return [{ value: { k: 'array', items: call, minItems: 1, maxItems: 1 } }];
  }
}

/** The system-prompt text that teaches the generic syntax to a model whose template has no tools. */
export function genericToolsPrompt(fns: readonly ToolFunction[]): string {
  const list = fns.map((fn) => JSON.stringify({ type: 'function', function: { name: fn.name, description: fn.description ?? '', parameters: fn.parameters ?? { type: 'object', properties: {} } } })).join('\n');
  return (
    'You may call one or more functions to assist with the user query. The functions you can call, as JSON, within <tools></tools> tags:\n' +
    `<tools>\n${list}\n</tools>\n` +
    'To call a function, answer with a JSON object with the function name and arguments within <tool_call></tool_call> tags:\n' +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}
