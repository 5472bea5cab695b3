// POST /v1/completions: a text or token-id prompt (or a batch of them, n choices each, in OpenAI's
// order), echo, logprobs (with echo: the prompt's own tokens scored too), fill-in-the-middle through
// `suffix`; the whole text_completion object or its chunks streamed as they are generated.
import { KiwiError } from '../../errors.js';
import type { CompletionBackend, FinishReason, PromptInput } from '../../completion/completion-backend.js';
import { jsonEndpoint, type EndpointCall, type EndpointContext } from '../api-endpoint.js';
import { checkModel } from '../api-request.js';
import type { ApiResponse } from '../api-response.js';
import { completionObjects } from '../completion-objects.js';
import type { ChoiceSpec } from '../generation-job.js';
import type { TokenInfo } from '../generation-pieces.js';
import { completionRequestSchema, toSamplingRequest, unsupportedParameter, type CompletionRequest } from '../openai-schema.js';
import { streamJob } from '../sse-stream.js';

export const completionsEndpoint = jsonEndpoint('/v1/completions', completionRequestSchema, completion, (body) => unsupportedParameter('completions', body));

async function completion(ctx: EndpointContext, { req, log }: EndpointCall, body: CompletionRequest): Promise<ApiResponse> {
  const { backend } = ctx;
  checkModel(backend, body.model);
  if (body.best_of != null && body.best_of !== (body.n ?? 1)) {
    throw new KiwiError('API_BAD_REQUEST', "'best_of' other than 'n' is not supported (no server-side ranking); drop it or set it to n", { param: 'best_of' });
  }
  const suffix = body.suffix ?? undefined;
  const prompts = await Promise.all(promptInputs(body.prompt).map((input) => (suffix !== undefined && suffix !== '' ? ctx.prepare(fillInTheMiddle(backend, input, suffix)) : ctx.prepare(input))));
  const s = toSamplingRequest(body);
  const topLogprobs = body.logprobs ?? undefined;
  const echo = body.echo === true;
  // OpenAI's order: the n choices of prompt 0, then those of prompt 1, ...
  const choices = prompts.flatMap((prompt, pi) => Array.from({ length: s.n }, (_, i): ChoiceSpec => ({ prompt, index: pi * s.n + i, echo: echo ? prompt.text : '' })));
  const job = await ctx.jobs.start(req, choices, s, topLogprobs);
  const objects = completionObjects({ idPrefix: 'cmpl', object: 'text_completion', chunkObject: 'text_completion', model: backend.modelId, prompts, includeUsage: s.includeUsage });
  // echo with logprobs: the prompt's own tokens are scored first (one forced pass per prompt).
  const echoScores = echo && topLogprobs !== undefined ? await Promise.all(prompts.map((prompt) => ctx.jobs.scorePrompt(job, prompt, topLogprobs))) : undefined;
  const echoTokens = (c: ChoiceSpec): TokenInfo[] => echoScores?.[prompts.indexOf(c.prompt)] ?? [];
  if (!s.stream) {
    return objects.whole(ctx.jobs, job, log, (r, i) => {
      const c = choices[i]!;
      return {
        index: c.index,
        text: c.echo + r.text,
        logprobs: topLogprobs === undefined ? null : completionLogprobs([...echoTokens(c), ...r.tokens], 0),
        finish_reason: r.finishReason,
      };
    });
  }
  const offsets = choices.map(() => 0);
  const chunk = (i: number, text: string, tokens: readonly TokenInfo[] | null, finishReason: FinishReason | null): string => {
    const logprobs = topLogprobs === undefined || tokens === null ? null : completionLogprobs(tokens, offsets[i]!);
    offsets[i]! += text.length;
    return objects.chunk({ index: choices[i]!.index, text, logprobs, finish_reason: finishReason });
  };
  return streamJob(ctx, job, log, {
    first: (i) => (choices[i]!.echo !== '' ? chunk(i, choices[i]!.echo, echoTokens(choices[i]!), null) : ''),
    piece: (i, piece) => chunk(i, piece.text, piece.tokens, null),
    last: (i, finishReason) => chunk(i, '', null, finishReason),
    usage: (completionTokens) => objects.usageChunk(completionTokens),
  });
}

/** The prompts of a request, one each: a string, strings, token ids or arrays of them. */
function promptInputs(p: CompletionRequest['prompt']): PromptInput[] {
  return typeof p === 'string'
    ? [{ kind: 'text', text: p }]
    : typeof p[0] === 'string'
      ? (p as string[]).map((text) => ({ kind: 'text', text }))
      : typeof p[0] === 'number'
        ? [{ kind: 'ids', ids: p as number[] }]
        : (p as number[][]).map((ids) => ({ kind: 'ids', ids }));
}

/** Rebuilds a completion prompt as fill-in-the-middle when the vocabulary has FIM tokens; else a 400 naming `suffix`. */
function fillInTheMiddle(backend: CompletionBackend, input: PromptInput, suffix: string): PromptInput {
  const fim = backend.fimTokens?.();
  if (fim === undefined) {
    throw new KiwiError('API_BAD_REQUEST', `'suffix' needs a model with fill-in-the-middle tokens; ${backend.modelId} has none`, { param: 'suffix' });
  }
  if (input.kind !== 'text') throw new KiwiError('API_BAD_REQUEST', "'suffix' works with text prompts, not token ids", { param: 'suffix' });
  return { kind: 'text', text: `${fim.prefix}${input.text}${fim.suffix}${suffix}${fim.middle}` };
}

/** Completions' `logprobs` object for tokens whose text starts at `offset` of the choice's text; a token without logprobs (a prompt's first) gets null. */
function completionLogprobs(tokens: readonly TokenInfo[], offset: number) {
  const textOffset: number[] = [];
  let at = offset;
  for (const t of tokens) {
    textOffset.push(at);
    at += t.text.length;
  }
  return {
    tokens: tokens.map((t) => t.text),
    token_logprobs: tokens.map((t) => t.logprobs?.logprob ?? null),
    top_logprobs: tokens.map((t) => (t.logprobs === undefined ? null : Object.fromEntries(t.logprobs.top.map((a) => [a.text, a.logprob])))),
    text_offset: textOffset,
  };
}
