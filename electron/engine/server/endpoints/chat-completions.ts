// POST /v1/chat/completions: the messages rendered by the model's chat template, n choices, tools and
// response_format (server/tools/chat-tools.ts: what the template renders, what the grammar forces),
// logprobs; the whole chat.completion object or its chunks streamed as they are generated.
import { KiwiError } from '../../errors.js';
import type { FinishReason } from '../../completion/completion-backend.js';
import { jsonEndpoint, type EndpointCall, type EndpointContext } from '../api-endpoint.js';
import { checkModel } from '../api-request.js';
import type { ApiResponse } from '../api-response.js';
import { completionObjects } from '../completion-objects.js';
import type { ChoiceSpec } from '../generation-job.js';
import type { TokenInfo } from '../generation-pieces.js';
import { chatCompletionRequestSchema, messageText, toSamplingRequest, unsupportedParameter, type ChatCompletionRequest } from '../openai-schema.js';
import { streamJob } from '../sse-stream.js';
import { ChatToolOutput, chatGrammar, chatTurns, planChatTools, type ToolCallOut } from '../tools/chat-tools.js';

export const chatCompletionsEndpoint = jsonEndpoint('/v1/chat/completions', chatCompletionRequestSchema, chatCompletion, (body) => unsupportedParameter('chat', body));

async function chatCompletion(ctx: EndpointContext, { req, log }: EndpointCall, body: ChatCompletionRequest): Promise<ApiResponse> {
  const { backend } = ctx;
  checkModel(backend, body.model);
  if (body.top_logprobs != null && body.logprobs !== true) {
    throw new KiwiError('API_BAD_REQUEST', "'top_logprobs' needs 'logprobs': true", { param: 'top_logprobs' });
  }
  const tools = planChatTools(body);
  const prompt = await ctx.prepare({ kind: 'chat', messages: chatTurns(body.messages, messageText), tools: tools.offered });
  const syntax = prompt.toolSyntax ?? 'generic';
  const grammar = chatGrammar(body, tools, syntax);
  const s = toSamplingRequest(body);
  const topLogprobs = body.logprobs === true ? (body.top_logprobs ?? 0) : undefined;
  const choices = Array.from({ length: s.n }, (_, i): ChoiceSpec => ({ prompt, index: i, echo: '' }));
  const job = await ctx.jobs.start(req, choices, s, topLogprobs, grammar);
  const objects = completionObjects({ idPrefix: 'chatcmpl', object: 'chat.completion', chunkObject: 'chat.completion.chunk', model: backend.modelId, prompts: [prompt], includeUsage: s.includeUsage });
  const chatLogprobs = (tokens: readonly TokenInfo[]) => (topLogprobs === undefined ? null : { content: tokens.map(chatLogprob), refusal: null });
  if (!s.stream) {
    return objects.whole(ctx.jobs, job, log, (r, i) => {
      const out = new ChatToolOutput(tools, syntax);
      out.push(r.text);
      out.finish();
      return { index: i, message: out.message(), logprobs: chatLogprobs(r.tokens), finish_reason: out.finishReason(r.finishReason) };
    });
  }
  const chunk = (index: number, delta: Record<string, unknown>, tokens: readonly TokenInfo[] | null, finishReason: FinishReason | 'tool_calls' | null): string =>
    objects.chunk({ index, delta, logprobs: tokens === null ? null : chatLogprobs(tokens), finish_reason: finishReason });
  // Text that may be a tool call is held back by the parser; finished calls go out as delta.tool_calls.
  const outs = choices.map(() => new ChatToolOutput(tools, syntax));
  const toolPiece = (i: number, d: { content: string; calls: ToolCallOut[] }, tokens: readonly TokenInfo[] | null): string =>
    (d.content !== '' || (!tools.parse && tokens !== null) ? chunk(i, { content: d.content }, tokens, null) : '') +
    outs[i]!.deltas(d.calls).map((delta) => chunk(i, delta, null, null)).join('');
  return streamJob(ctx, job, log, {
    first: (i) => chunk(i, { role: 'assistant', content: '' }, null, null),
    piece: (i, p) => toolPiece(i, outs[i]!.push(p.text), p.tokens),
    last: (i, finishReason) => toolPiece(i, outs[i]!.finish(), null) + chunk(i, {}, null, outs[i]!.finishReason(finishReason)),
    usage: (completionTokens) => objects.usageChunk(completionTokens),
  });
}

/** One entry of chat `logprobs.content`. */
function chatLogprob(t: TokenInfo) {
  return {
    token: t.text,
    logprob: t.logprobs?.logprob ?? 0,
    bytes: tokenBytes(t.text),
    top_logprobs: (t.logprobs?.top ?? []).map((a) => ({ token: a.text, logprob: a.logprob, bytes: tokenBytes(a.text) })),
  };
}

function tokenBytes(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}
