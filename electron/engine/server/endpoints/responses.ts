// POST /v1/responses: the stateless Responses API (its schema and objects in responses-api.ts) run
// through chat's path: the input items become chat turns, function tools and text.format go through
// chat's tool calling and constrained decoding (server/tools). Streams the numbered `response.*`
// events the official SDK's `responses.stream` reads.
import { randomBytes } from 'node:crypto';
import type { FinishReason } from '../../completion/completion-backend.js';
import { jsonEndpoint, type EndpointCall, type EndpointContext } from '../api-endpoint.js';
import { checkModel } from '../api-request.js';
import { json, type ApiResponse } from '../api-response.js';
import { toSamplingRequest } from '../openai-schema.js';
import {
  functionCallItem,
  messageItem,
  outputPart,
  ResponseEventWriter,
  responseObject,
  responsesRequestSchema,
  responseStatus,
  responsesToolRequest,
  responsesTurns,
  unsupportedResponsesParameter,
  type ResponseIds,
  type ResponsesRequest,
} from '../responses-api.js';
import { streamJob } from '../sse-stream.js';
import { ChatToolOutput, chatGrammar, planChatTools, type ToolCallOut } from '../tools/chat-tools.js';

export const responsesEndpoint = jsonEndpoint('/v1/responses', responsesRequestSchema, responses, unsupportedResponsesParameter);

async function responses(ctx: EndpointContext, { req, log }: EndpointCall, body: ResponsesRequest): Promise<ApiResponse> {
  const { backend } = ctx;
  checkModel(backend, body.model);
  const toolRequest = responsesToolRequest(body);
  const tools = planChatTools(toolRequest);
  const prompt = await ctx.prepare({ kind: 'chat', messages: responsesTurns(body), tools: tools.offered });
  const syntax = prompt.toolSyntax ?? 'generic';
  const grammar = chatGrammar(toolRequest, tools, syntax);
  const s = toSamplingRequest({ temperature: body.temperature, top_p: body.top_p, max_tokens: body.max_output_tokens, stream: body.stream });
  const job = await ctx.jobs.start(req, [{ prompt, index: 0, echo: '' }], s, undefined, grammar);
  const ids: ResponseIds = {
    id: `resp_${randomBytes(16).toString('hex')}`,
    messageId: `msg_${randomBytes(16).toString('hex')}`,
    createdAt: Math.floor(Date.now() / 1000),
    model: backend.modelId,
  };
  const out = new ChatToolOutput(tools, syntax);
  const callOf = (c: ToolCallOut) => ({ id: `fc_${randomBytes(16).toString('hex')}`, call: { call_id: c.id, name: c.function.name, arguments: c.function.arguments } });
  // A call ends the response as completed even where the text ran to max_output_tokens.
  const statusOf = (finishReason: FinishReason) => (out.calls.length > 0 ? 'completed' : responseStatus(finishReason));
  if (!s.stream) {
    const [r] = await ctx.jobs.collectAll(job);
    log.tokens = r!.completionTokens;
    out.push(r!.text);
    out.finish();
    const text = out.message().content ?? '';
    const output = [
      ...(text !== '' || out.calls.length === 0 ? [messageItem(ids, text, 'completed')] : []),
      ...out.calls.map(callOf).map((f) => functionCallItem(f.id, f.call, 'completed')),
    ];
    const usageNow = { inputTokens: prompt.ids.length, outputTokens: r!.completionTokens };
    return json(200, responseObject(body, ids, { status: statusOf(r!.finishReason), outputText: text, output, finishReason: r!.finishReason, usage: usageNow }));
  }
  const w = new ResponseEventWriter();
  const output: Record<string, unknown>[] = [];
  let text = '';
  let message: { index: number } | undefined;
  const part = () => ({ output_index: message!.index, item_id: ids.messageId, content_index: 0 });
  const openMessage = (): string => {
    message = { index: output.length };
    output.push(messageItem(ids, '', 'in_progress'));
    return w.write('response.output_item.added', { output_index: message.index, item: messageItem(ids, '', 'in_progress') }) + w.write('response.content_part.added', { ...part(), part: outputPart('') });
  };
  const closeMessage = (): string => {
    if (message === undefined) return '';
    const events =
      w.write('response.output_text.done', { ...part(), text, logprobs: [] }) +
      w.write('response.content_part.done', { ...part(), part: outputPart(text) }) +
      w.write('response.output_item.done', { output_index: message.index, item: messageItem(ids, text, 'completed') });
    output[message.index] = messageItem(ids, text, 'completed');
    message = undefined;
    return events;
  };
  // Content streams as it comes; each finished call closes the message so far and goes out as its own item.
  const emit = (d: { content: string; calls: ToolCallOut[] }): string => {
    let events = '';
    if (d.content !== '') {
      if (message === undefined && output.length === 0) events += openMessage();
      if (message !== undefined) {
        text += d.content;
        events += w.write('response.output_text.delta', { ...part(), delta: d.content, logprobs: [] });
      }
    }
    for (const f of d.calls.map(callOf)) {
      events += closeMessage();
      const index = output.length;
      output.push(functionCallItem(f.id, f.call, 'completed'));
      events +=
        w.write('response.output_item.added', { output_index: index, item: functionCallItem(f.id, f.call, 'in_progress') }) +
        w.write('response.function_call_arguments.delta', { output_index: index, item_id: f.id, delta: f.call.arguments }) +
        w.write('response.function_call_arguments.done', { output_index: index, item_id: f.id, name: f.call.name, arguments: f.call.arguments }) +
        w.write('response.output_item.done', { output_index: index, item: functionCallItem(f.id, f.call, 'completed') });
    }
    return events;
  };
  return streamJob(ctx, job, log, {
    first: () =>
      w.write('response.created', { response: responseObject(body, ids, { status: 'in_progress' }) }) +
      w.write('response.in_progress', { response: responseObject(body, ids, { status: 'in_progress' }) }),
    piece: (_, p) => emit(out.push(p.text)),
    last: () => {
      let events = emit(out.finish());
      if (output.length === 0) events += openMessage();
      return events + closeMessage();
    },
    usage: () => '',
    end: (finishReason, completionTokens) => {
      const status = statusOf(finishReason);
      const usageNow = { inputTokens: prompt.ids.length, outputTokens: completionTokens };
      return w.write(`response.${status}`, { response: responseObject(body, ids, { status, outputText: text, output, finishReason, usage: usageNow }) });
    },
  });
}
