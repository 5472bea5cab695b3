// The chat completion's tool calling and structured output, between the HTTP layer and the engine:
// the request fields (validated with zod where they enter), the plan they make (which tools the
// template renders, which grammar constrains the output), and the answer turned back into an
// OpenAI message: content and/or tool_calls with ids, finish_reason "tool_calls", and the
// streamed `delta.tool_calls` chunks (index, id, type, function.name, then function.arguments).
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { KiwiError } from '../../errors.js';
import type { JsonGrammar } from '../../runtime/constrained/json-automaton.js';
import { ANY_OBJECT, compileJsonSchema } from '../../runtime/constrained/json-schema-shape.js';
import { cachedGrammar } from '../../runtime/constrained/token-constraint.js';
import type { ChatTurn } from '../../completion/completion-backend.js';
import { createToolCallParser, type ParsedCall, type ToolCallParser } from './tool-call-parser.js';
import type { ToolCallRecord } from '../../completion/tool-prompt.js';
import { forcedCallGrammar, type ToolFunction, type ToolSyntax } from '../../completion/tool-syntax.js';

const MAX_TOOLS = 128;
const MAX_SCHEMA_CHARS = 256 * 1024;

const jsonSchemaObject = z.record(z.string(), z.unknown()).refine((s) => JSON.stringify(s).length <= MAX_SCHEMA_CHARS, `a schema may hold at most ${MAX_SCHEMA_CHARS} characters`);

const functionName = z.string().regex(/^[a-zA-Z0-9_.-]{1,64}$/, 'a function name has 1 to 64 letters, digits, _ . or -');

/** Request fields of /v1/chat/completions for tools and structured output (spread into its schema). */
export const chatToolRequestFields = {
  tools: z
    .array(
      z.object({
        type: z.literal('function'),
        function: z.object({ name: functionName, description: z.string().max(16 * 1024).nullish(), parameters: jsonSchemaObject.nullish(), strict: z.boolean().nullish() }),
      }),
    )
    .max(MAX_TOOLS)
    .nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string().max(64) }) })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('json_object') }),
      z.object({
        type: z.literal('json_schema'),
        json_schema: z.object({ name: z.string().max(64), description: z.string().nullish(), schema: jsonSchemaObject.nullish(), strict: z.boolean().nullish() }),
      }),
    ])
    .nullish(),
};

/** Message fields for tool calling (spread into the message schema). */
export const chatToolMessageFields = {
  tool_calls: z
    .array(z.object({ id: z.string().max(256), type: z.literal('function'), function: z.object({ name: z.string().max(256), arguments: z.string().max(1024 * 1024) }) }))
    .max(MAX_TOOLS)
    .nullish(),
  tool_call_id: z.string().max(256).nullish(),
};

type ToolRequest = z.infer<z.ZodObject<typeof chatToolRequestFields>>;
type ToolMessage = z.infer<z.ZodObject<typeof chatToolMessageFields>> & { role: string; name?: string | null | undefined };

export interface ChatToolPlan {
  /** Tools the template renders (none for tool_choice "none"). */
  offered: ToolFunction[];
  /** Whether the output is parsed for calls. */
  parse: boolean;
  /** The functions one of which must be called (required / named), else undefined. */
  forced: ToolFunction[] | undefined;
  parallel: boolean;
}

/** Checks tools / tool_choice / parallel_tool_calls and decides what to render, parse and force. */
export function planChatTools(body: ToolRequest): ChatToolPlan {
  const tools: ToolFunction[] = (body.tools ?? []).map((t) => ({
    name: t.function.name,
    ...(t.function.description != null ? { description: t.function.description } : {}),
    ...(t.function.parameters != null ? { parameters: t.function.parameters } : {}),
  }));
  const names = new Set<string>();
  for (const t of tools) {
    if (names.has(t.name)) throw new KiwiError('API_BAD_REQUEST', `two tools are named '${t.name}'; tool names must be unique`, { param: 'tools' });
    names.add(t.name);
  }
  const choice = body.tool_choice ?? (tools.length > 0 ? 'auto' : 'none');
  const parallel = body.parallel_tool_calls ?? true;
  if (choice === 'none' || tools.length === 0) {
    if (choice !== 'none' && choice !== 'auto') throw new KiwiError('API_BAD_REQUEST', `tool_choice ${JSON.stringify(choice)} needs 'tools'`, { param: 'tool_choice' });
    return { offered: [], parse: false, forced: undefined, parallel };
  }
  let forced: ToolFunction[] | undefined;
  if (choice === 'required') forced = tools;
  else if (typeof choice === 'object') {
    const fn = tools.find((t) => t.name === choice.function.name);
    if (fn === undefined) throw new KiwiError('API_BAD_REQUEST', `tool_choice names the function '${choice.function.name}', which is not in 'tools'`, { param: 'tool_choice' });
    forced = [fn];
  }
  // Compile now: a tool schema the grammar cannot enforce is refused before anything runs.
  for (const fn of forced ?? []) if (fn.parameters !== undefined) compileJsonSchema(fn.parameters, 'tools');
  return { offered: tools, parse: true, forced, parallel };
}

/** The grammar that constrains this request's output, if any: a forced call, or response_format. */
export function chatGrammar(body: ToolRequest, plan: ChatToolPlan, syntax: ToolSyntax): JsonGrammar | undefined {
  const format = body.response_format;
  const wantsJson = format != null && format.type !== 'text';
  if (plan.forced !== undefined) {
    if (wantsJson) throw new KiwiError('API_BAD_REQUEST', "response_format cannot be combined with a tool_choice that forces a call; the call's arguments follow the tool's schema", { param: 'response_format' });
    const fns = plan.forced;
    return cachedGrammar({ kind: 'call', syntax, fns }, () => forcedCallGrammar(fns, syntax));
  }
  if (!wantsJson) return undefined;
  if (format.type === 'json_object' || format.json_schema.schema == null) return cachedGrammar({ kind: 'json_object' }, () => [{ value: ANY_OBJECT }]);
  const schema = format.json_schema.schema;
  return cachedGrammar({ kind: 'json_schema', schema }, () => [{ value: compileJsonSchema(schema, 'response_format') }]);
}

/** The API's messages as the backend's chat turns (content flattened by `text`). */
export function chatTurns<M extends ToolMessage>(messages: readonly M[], text: (m: M) => string): ChatTurn[] {
  return messages.map((m) => {
    const turn: ChatTurn = { role: m.role, content: text(m) };
    if (m.tool_calls != null && m.tool_calls.length > 0) turn.tool_calls = m.tool_calls as ToolCallRecord[];
    if (m.tool_call_id != null) turn.tool_call_id = m.tool_call_id;
    if (m.role === 'tool' && m.name != null) turn.name = m.name;
    return turn;
  });
}

export interface ToolCallOut {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

function newCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/**
 * One choice's output through the tool-call parser: content to send as it comes, and calls with
 * ids (at most one when parallel_tool_calls is false). Without tools the text passes unchanged.
 */
export class ChatToolOutput {
  private readonly parser: ToolCallParser | undefined;
  readonly calls: ToolCallOut[] = [];
  private content = '';

  constructor(
    private readonly plan: ChatToolPlan,
    syntax: ToolSyntax,
  ) {
    this.parser = plan.parse ? createToolCallParser(syntax) : undefined;
  }

  /** The content and new calls this text adds. */
  push(text: string): { content: string; calls: ToolCallOut[] } {
    if (this.parser === undefined) {
      this.content += text;
      return { content: text, calls: [] };
    }
    return this.take(this.parser.push(text));
  }

  finish(): { content: string; calls: ToolCallOut[] } {
    if (this.parser === undefined) return { content: '', calls: [] };
    return this.take(this.parser.finish());
  }

  /** The finish reason OpenAI gives: "tool_calls" once a call was made. */
  finishReason<R extends string>(reason: R): R | 'tool_calls' {
    return this.calls.length > 0 ? 'tool_calls' : reason;
  }

  /** The whole assistant message (non-streaming): content null when there is only a call. */
  message(): { role: 'assistant'; content: string | null; tool_calls?: ToolCallOut[] } {
    if (this.calls.length === 0) return { role: 'assistant', content: this.content };
    return { role: 'assistant', content: this.content.trim() === '' ? null : this.content, tool_calls: this.calls };
  }

  private take(p: { content: string; calls: ParsedCall[] }): { content: string; calls: ToolCallOut[] } {
    const fresh: ToolCallOut[] = [];
    for (const c of p.calls) {
      if (!this.plan.parallel && this.calls.length > 0) break;
      const call: ToolCallOut = { id: newCallId(), type: 'function', function: { name: c.name, arguments: c.arguments } };
      this.calls.push(call);
      fresh.push(call);
    }
    this.content += p.content;
    return { content: p.content, calls: fresh };
  }

  /** The `delta.tool_calls` entries of new calls: the call's id and name, then its arguments. */
  deltas(calls: readonly ToolCallOut[]): Record<string, unknown>[] {
    const deltas: Record<string, unknown>[] = [];
    for (const c of calls) {
      const index = this.calls.indexOf(c);
      deltas.push({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] });
      deltas.push({ tool_calls: [{ index, function: { arguments: c.function.arguments } }] });
    }
    return deltas;
  }
}
