// A chat with tools, made ready for the model's chat template as llama-server does it: a template
// that knows tools gets the `tools` variable and the history as OpenAI sends it (assistant turns
// with tool_calls, tool turns with tool_call_id; arguments as objects, which Llama/Qwen templates
// `tojson`); a template that does not gets the generic syntax: the tools explained in the system
// prompt, earlier calls written as `<tool_call>` text and tool results as `<tool_response>` user
// turns, so a result is never passed off as something the assistant said. Pure.
import type { ToolFunction } from './tool-syntax.js';
import { genericToolsPrompt, templateSupportsTools } from './tool-syntax.js';

export interface ToolCallRecord {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A chat turn as the API received it (content flattened to text). */
export interface ToolChatTurn {
  role: string;
  content: string;
  tool_calls?: readonly ToolCallRecord[] | undefined;
  tool_call_id?: string | undefined;
  name?: string | undefined;
}

/** A message as chat templates read it. */
export interface TemplateMessage {
  role: string;
  content: string;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: unknown } }[];
  tool_call_id?: string;
  name?: string;
}

function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text; // not JSON: the template gets the string as it came
  }
}

function callText(c: ToolCallRecord): string {
  return `<tool_call>\n{"name": ${JSON.stringify(c.function.name)}, "arguments": ${c.function.arguments}}\n</tool_call>`;
}

/** The messages and extra template variables for `template`. `tools` undefined or empty: none offered. */
export function toolChatInput(template: string, turns: readonly ToolChatTurn[], tools: readonly ToolFunction[] | undefined): { messages: TemplateMessage[]; variables: Record<string, unknown> } {
  const offered = tools !== undefined && tools.length > 0;
  if (templateSupportsTools(template)) {
    const messages = turns.map((t): TemplateMessage => {
      const m: TemplateMessage = { role: t.role, content: t.content };
      if (t.tool_calls !== undefined && t.tool_calls.length > 0) {
        m.tool_calls = t.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: parsedArguments(c.function.arguments) } }));
      }
      if (t.tool_call_id !== undefined) m.tool_call_id = t.tool_call_id;
      if (t.name !== undefined) m.name = t.name;
      return m;
    });
    return { messages, variables: offered ? { tools: tools.map((fn) => ({ type: 'function', function: { ...fn, parameters: fn.parameters ?? { type: 'object', properties: {} } } })) } : {} };
  }
  const messages = turns.map((t): TemplateMessage => {
    if (t.role === 'tool') return { role: 'user', content: `<tool_response>\n${t.content}\n</tool_response>` };
    if (t.tool_calls !== undefined && t.tool_calls.length > 0) {
      return { role: t.role, content: [t.content, ...t.tool_calls.map(callText)].filter((s) => s !== '').join('\n') };
    }
    return { role: t.role, content: t.content };
  });
  if (offered) {
    const prompt = genericToolsPrompt(tools);
    if (messages[0]?.role === 'system') messages[0] = { role: 'system', content: `${messages[0].content}\n\n${prompt}` };
    else messages.unshift({ role: 'system', content: prompt });
  }
  return { messages, variables: {} };
}
