// What every CompletionBackend does the same way around its generator (a BatchGenerator in this
// process, the RingGenerator over a ring): tokenizing a prompt input, and turning one generation
// into the stream of token / end events, with cancellation by the caller, by a consumer that stops
// reading, or by the backend's close().
import { KiwiError } from '../errors.js';
import { encodeChatPrompt, type ChatTemplate } from '../model/chat-template.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import type { GenerateParams, GenerateResult } from '../runtime/generation-loop.js';
import { Sampler } from '../runtime/sampling.js';
import { createConstraint } from '../runtime/constrained/token-constraint.js';
import type { GenerationEvent, GenerationRequest, PreparedPrompt, PromptInput } from './completion-backend.js';
import { toolChatInput } from './tool-prompt.js';
import { toolSyntaxOf } from './tool-syntax.js';

/** What a backend drives: the generation loop (runtime/generation-loop.ts), in this process or over the ring. */
export interface TokenGenerator {
  generate(p: GenerateParams): Promise<GenerateResult>;
}

/** Generations so far by how they ended. */
export interface GenerationCounts {
  completed: number;
  cancelled: number;
  failed: number;
}

/** A backend's bookkeeping of its generations: close() cancels every key and awaits every value. */
export type RunningGenerations = Map<(reason: unknown) => void, Promise<unknown>>;

/** Tokenizes a prompt input (rendering chat messages with the template); throws KiwiError on bad input. */
export function preparePrompt(tok: Tokenizer, template: ChatTemplate, prompt: PromptInput): PreparedPrompt {
  let ids: number[];
  let text: string;
  let toolSyntax: PreparedPrompt['toolSyntax'];
  switch (prompt.kind) {
    case 'chat': {
      // OpenAI's newer 'developer' role is the 'system' role of chat templates.
      const turns = prompt.messages.map((m) => ({ ...m, role: m.role === 'developer' ? 'system' : m.role }));
      const { messages, variables } = toolChatInput(template.template, turns, prompt.tools);
      ({ text, ids } = encodeChatPrompt(tok, template, messages, { variables }));
      toolSyntax = toolSyntaxOf(template.template);
      break;
    }
    case 'text':
      text = prompt.text;
      ids = tok.encode(text, { parseSpecial: true });
      break;
    case 'ids':
      for (const id of prompt.ids) {
        if (id >= tok.vocabSize) {
          throw new KiwiError('TOKEN_INVALID', `prompt token ${id} is outside the vocabulary of ${tok.vocabSize} tokens`, { param: 'prompt' });
        }
      }
      ids = [...prompt.ids];
      text = tok.decode(ids, { special: true });
      break;
  }
  if (ids.length === 0) throw new KiwiError('API_BAD_REQUEST', 'the prompt is empty; give at least one token', { param: prompt.kind === 'chat' ? 'messages' : 'prompt' });
  return toolSyntax !== undefined ? { ids, text, toolSyntax } : { ids, text };
}

/** FIM token spellings of the families that have them: Qwen2.5-Coder / StarCoder2 / DeepSeek-style `<|fim_*|>`, StarCoder's `<fim_*>`, CodeLlama's `<PRE>`. */
const FIM_SPELLINGS: ReadonlyArray<readonly [string, string, string]> = [
  ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'],
  ['<fim_prefix>', '<fim_suffix>', '<fim_middle>'],
  ['<|fim▁begin|>', '<|fim▁hole|>', '<|fim▁end|>'],
  ['▁<PRE>', '▁<SUF>', '▁<MID>'],
];

/** The vocabulary's fill-in-the-middle tokens (as text the prompt tokenizer turns back into them), if it has a full set. */
export function fimTokensOf(tok: Tokenizer): { prefix: string; suffix: string; middle: string } | undefined {
  for (const [p, s, m] of FIM_SPELLINGS) {
    if (tok.tokenId(p) !== undefined && tok.tokenId(s) !== undefined && tok.tokenId(m) !== undefined) {
      const text = (t: string) => t.replace(/^▁/, '');
      return { prefix: text(p), suffix: text(s), middle: text(m) };
    }
  }
  return undefined;
}

/**
 * Runs one generation and yields its events: tokens, then one `end` (or throws the generator's
 * error). Aborting `signal`, or stopping to read early, cancels the generation; the generator ends
 * a cancelled request alone, in whatever state it is, and frees what it holds (KV blocks; in a
 * ring, its caches on every stage). Each generation is in `running` until it settled.
 */
export async function* streamGeneration(
  generator: TokenGenerator,
  tok: Tokenizer,
  request: GenerationRequest,
  signal: AbortSignal,
  track: { counts: GenerationCounts; running: RunningGenerations },
): AsyncGenerator<GenerationEvent> {
  const cancel = new AbortController();
  let ended = false;
  const stop = (reason: unknown): void => cancel.abort(reason);
  const onAbort = (): void => stop(signal.reason);
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });

  const events: GenerationEvent[] = [];
  let failure: { error: unknown } | undefined;
  let wake: (() => void) | undefined;
  const notify = (): void => {
    wake?.();
    wake = undefined;
  };
  const decoder = tok.createStreamDecoder();
  const sampler = new Sampler(request.sampling);
  // Scoring a given text (forced ids, for echo's prompt logprobs): an end-of-generation token in it is just a token.
  const scoring = request.sampling.forcedIds !== undefined;
  const done = generator
    .generate({
      promptIds: request.promptIds,
      maxTokens: request.maxTokens,
      sampler,
      isEndOfGeneration: (id) => !scoring && tok.isEndOfGeneration(id),
      // The streamed pieces (token_to_piece, as llama.cpp's server sends them); stop sequences are looked for in them.
      decoder,
      stop: request.stop,
      signal: cancel.signal,
      ...(request.grammar !== undefined ? { constraint: createConstraint(request.grammar, tok) } : {}),
      onToken: (id, text) => {
        events.push({ type: 'token', id, text, logprobs: sampler.lastLogprobs });
        notify();
      },
    })
    .then(
      (result) => {
        track.counts.completed++;
        events.push({ type: 'end', finishReason: result.finishReason, text: decoder.flush(), completionTokens: result.ids.length });
        notify();
      },
      (error: unknown) => {
        if (cancel.signal.aborted) track.counts.cancelled++;
        else track.counts.failed++;
        failure = { error };
        notify();
      },
    );
  track.running.set(stop, done);
  try {
    for (;;) {
      const event = events.shift();
      if (event !== undefined) {
        if (event.type === 'end') ended = true;
        yield event;
        if (ended) return;
      } else if (failure !== undefined) {
        throw failure.error;
      } else {
        await new Promise<void>((resolve) => (wake = resolve));
      }
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    // A consumer that stops reading early cancels the generation (and so frees what it holds).
    if (!ended && !cancel.signal.aborted) stop(new KiwiError('API_CLIENT_CLOSED', 'the consumer stopped reading'));
    void done.then(() => track.running.delete(stop));
  }
}
