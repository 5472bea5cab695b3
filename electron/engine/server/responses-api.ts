// The stateless subset of OpenAI's Responses API (POST /v1/responses): the request schema, its
// translation into chat turns and sampling fields, and the response object and stream events the
// official SDK's `responses.create` / `responses.stream` read. Pure: values in, values out; the
// generation itself runs through the same path as /v1/chat/completions (endpoints/responses.ts).
import { z } from 'zod';
import type { ChatTurn, FinishReason } from '../completion/completion-backend.js';

const MAX_TEXT_CHARS = 4 * 1024 * 1024;
const text = z.string().max(MAX_TEXT_CHARS);

/** Content parts of an input message: text only (input_text, or output_text of earlier assistant turns). */
const part = z.object({ type: z.enum(['input_text', 'output_text', 'text']), text });

const inputMessage = z.object({
  type: z.literal('message').nullish(),
  role: z.enum(['system', 'developer', 'user', 'assistant']),
  content: z.union([text, z.array(part).max(256)]),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/** An earlier call of the model, sent back in the history. */
const functionCallInput = z.object({
  type: z.literal('function_call'),
  call_id: z.string().max(256),
  name: z.string().max(256),
  arguments: z.string().max(1024 * 1024),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/** The result of a call, for the model to read. */
const functionCallOutputItem = z.object({
  type: z.literal('function_call_output'),
  call_id: z.string().max(256),
  output: z.union([text, z.array(part).max(256)]),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

const inputItem = z.union([inputMessage, functionCallInput, functionCallOutputItem]);

/** Responses' flat function tool ({type, name, parameters}), mapped onto chat's nested one. */
const functionTool = z.object({
  type: z.literal('function'),
  name: z.string(),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

export const responsesRequestSchema = z.object({
  model: z.string().max(512).optional(),
  input: z.union([text, z.array(inputItem).min(1).max(1024)]),
  tools: z.array(functionTool).max(128).nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), name: z.string() })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  instructions: text.nullish(),
  max_output_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  stream: z.boolean().nullish(),
  // Accepted and echoed back; they change nothing of the output.
  metadata: z.record(z.string(), z.string()).nullish(),
  store: z.boolean().nullish(),
  user: z.string().nullish(),
  text: z
    .object({
      format: z
        .object({ type: z.enum(['text', 'json_object', 'json_schema']), name: z.string().nullish(), schema: z.record(z.string(), z.unknown()).nullish(), strict: z.boolean().nullish() })
        .nullish(),
      verbosity: z.string().nullish(),
    })
    .nullish(),
});

export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

/** Parameters of the Responses API that Kiwi cannot honour here (state, built-in tools), refused with a 400 naming them. */
export function unsupportedResponsesParameter(body: unknown): { param: string; message: string } | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as Record<string, unknown>;
  const refuse = (param: string, why: string) => ({ param, message: `'${param}' is not supported by this server: ${why}` });
  if (b.previous_response_id != null) return refuse('previous_response_id', 'the server keeps no state; send the whole conversation as input items');
  if (b.conversation != null) return refuse('conversation', 'the server keeps no state; send the whole conversation as input items');
  if (b.background === true) return refuse('background', 'background responses need stored state');
  const typeOf = (x: unknown): unknown => (typeof x === 'object' && x !== null ? (x as { type?: unknown }).type : undefined);
  if (Array.isArray(b.tools)) {
    const i = b.tools.findIndex((t) => typeOf(t) !== 'function');
    if (i >= 0) return refuse(`tools.${i}.type`, `built-in tools ('${String(typeOf(b.tools[i]))}') are not available; only function tools are`);
  }
  if (Array.isArray(b.input)) {
    const known = new Set([undefined, null, 'message', 'function_call', 'function_call_output']);
    const i = b.input.findIndex((item) => !known.has(typeOf(item) as string | undefined | null));
    if (i >= 0) return refuse(`input.${i}.type`, `input items of type '${String(typeOf(b.input[i]))}' are not supported; send messages and function calls`);
  }
  return undefined;
}

const partsText = (c: string | Array<{ text: string }>): string => (typeof c === 'string' ? c : c.map((p) => p.text).join(''));

/**
 * The chat turns for the model: instructions first (as the system turn), then the input items;
 * consecutive function_call items become one assistant turn with tool_calls, and each
 * function_call_output a tool turn, as the chat API would carry them.
 */
export function responsesTurns(r: ResponsesRequest): ChatTurn[] {
  const turns: ChatTurn[] = [];
  if (r.instructions != null && r.instructions !== '') turns.push({ role: 'system', content: r.instructions });
  if (typeof r.input === 'string') {
    turns.push({ role: 'user', content: r.input });
    return turns;
  }
  for (const item of r.input) {
    if (item.type === 'function_call') {
      const call = { id: item.call_id, type: 'function' as const, function: { name: item.name, arguments: item.arguments } };
      const last = turns.at(-1);
      if (last?.role === 'assistant' && last.tool_calls !== undefined) last.tool_calls = [...last.tool_calls, call];
      else turns.push({ role: 'assistant', content: '', tool_calls: [call] });
    } else if (item.type === 'function_call_output') {
      turns.push({ role: 'tool', content: partsText(item.output), tool_call_id: item.call_id });
    } else {
      turns.push({ role: item.role, content: partsText(item.content) });
    }
  }
  return turns;
}

/** The request's tools, tool_choice and text.format in the chat API's shape (for server/tools/chat-tools.ts). */
export function responsesToolRequest(r: ResponsesRequest) {
  const choice = r.tool_choice;
  const format = r.text?.format;
  return {
    tools: r.tools?.map((t) => ({
      type: 'function' as const,
      function: { name: t.name, ...(t.description != null ? { description: t.description } : {}), ...(t.parameters != null ? { parameters: t.parameters } : {}), strict: t.strict ?? null },
    })),
    tool_choice: choice == null || typeof choice === 'string' ? choice : { type: 'function' as const, function: { name: choice.name } },
    parallel_tool_calls: r.parallel_tool_calls,
    response_format:
      format == null
        ? undefined
        : format.type === 'json_schema'
          ? { type: 'json_schema' as const, json_schema: { name: format.name ?? 'output', schema: format.schema ?? null, strict: format.strict ?? null } }
          : { type: format.type },
  };
}

export interface FunctionCallOut {
  call_id: string;
  name: string;
  arguments: string;
}

/** A function_call output item. */
export function functionCallItem(id: string, call: FunctionCallOut, status: 'in_progress' | 'completed'): Record<string, unknown> {
  return { type: 'function_call', id, call_id: call.call_id, name: call.name, arguments: status === 'completed' ? call.arguments : '', status };
}

export interface ResponseIds {
  id: string;
  messageId: string;
  createdAt: number;
  model: string;
}

export interface ResponseUsage {
  inputTokens: number;
  outputTokens: number;
}

/** The response object; `outputText` undefined while in progress (no output item yet). */
export function responseObject(
  r: ResponsesRequest,
  ids: ResponseIds,
  state: { status: 'in_progress' | 'completed' | 'incomplete'; outputText?: string; finishReason?: FinishReason; usage?: ResponseUsage; output?: Record<string, unknown>[] },
): Record<string, unknown> {
  return {
    id: ids.id,
    object: 'response',
    created_at: ids.createdAt,
    status: state.status,
    error: null,
    incomplete_details: state.status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: ids.model,
    output: state.output ?? (state.outputText === undefined ? [] : [messageItem(ids, state.outputText, 'completed')]),
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: null,
    store: false,
    temperature: r.temperature ?? 1,
    text: { format: r.text?.format ?? { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? 1,
    truncation: 'disabled',
    usage:
      state.usage === undefined
        ? null
        : {
            input_tokens: state.usage.inputTokens,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: state.usage.outputTokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: state.usage.inputTokens + state.usage.outputTokens,
          },
    user: r.user ?? null,
    metadata: r.metadata ?? {},
  };
}

export function messageItem(ids: ResponseIds, outputText: string, status: 'in_progress' | 'completed'): Record<string, unknown> {
  return {
    type: 'message',
    id: ids.messageId,
    status,
    role: 'assistant',
    content: status === 'in_progress' ? [] : [outputPart(outputText)],
  };
}

export function outputPart(outputText: string): Record<string, unknown> {
  return { type: 'output_text', text: outputText, annotations: [], logprobs: [] };
}

/** 'completed', or 'incomplete' when the output ran into max_output_tokens (or the context). */
export function responseStatus(finishReason: FinishReason): 'completed' | 'incomplete' {
  return finishReason === 'length' ? 'incomplete' : 'completed';
}

/** Numbers the events of one stream (`sequence_number`) and writes them as SSE with their `event:` name. */
export class ResponseEventWriter {
  private seq = 0;

  write(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`;
  }
}
