// The generations of one completion request (chat, text, responses): its prompts checked against the
// context, a slot from the request queue (held until the response is done or the request is
// cancelled, even if its stream is never read), and one backend generation per choice with its own
// sampling stream. Endpoints decide what to generate; this decides how it runs.
import { randomInt } from 'node:crypto';
import { KiwiError } from '../errors.js';
import { DEFAULT_SAMPLING } from '../runtime/sampling.js';
import type { SamplingOptions } from '../runtime/sampling.js';
import type { CompletionBackend, PreparedPrompt } from '../completion/completion-backend.js';
import type { JsonGrammar } from '../runtime/constrained/json-automaton.js';
import { checkTokenIds, type ApiRequest } from './api-request.js';
import { collect, tokenInfo, type CollectResult, type Run, type TokenInfo } from './generation-pieces.js';
import type { SamplingRequest } from './openai-schema.js';
import type { RequestQueue } from './request-queue.js';

/** How far back presence/frequency/repeat penalties look (llama.cpp's repeat_last_n default). */
const PENALTY_WINDOW = 64;

/** One choice to generate: its prompt, its index in the response, the text echoed before it. */
export interface ChoiceSpec {
  prompt: PreparedPrompt;
  index: number;
  echo: string;
}

/** The generations of one request, sharing its queue slot. */
export interface Job {
  runs: Run[];
  includeUsage: boolean;
  release: () => void;
  signal: AbortSignal;
  sampling: (choice: number) => SamplingOptions;
}

export interface Jobs {
  /** Checks the prompts against the context, waits for a slot, and starts one generation per choice. */
  start(req: ApiRequest, choices: readonly ChoiceSpec[], s: SamplingRequest, topLogprobs: number | undefined, grammar?: JsonGrammar): Promise<Job>;
  /** The request's queue slot; freed by the returned function, or when the request is cancelled even if its stream was never read. */
  admit(req: ApiRequest): Promise<() => void>;
  /** Runs every choice to the end, then frees the slot. */
  collectAll(job: Job): Promise<CollectResult[]>;
  /** The log-probabilities of a prompt's own tokens (completions `echo` with `logprobs`): its first token has none. */
  scorePrompt(job: Job, prompt: PreparedPrompt, topLogprobs: number): Promise<TokenInfo[]>;
}

export function createJobs(backend: CompletionBackend, queue: RequestQueue): Jobs {
  async function start(req: ApiRequest, choices: readonly ChoiceSpec[], s: SamplingRequest, topLogprobs: number | undefined, grammar?: JsonGrammar): Promise<Job> {
    const context = backend.contextTokens;
    for (const c of choices) {
      if (c.prompt.ids.length >= context) {
        throw new KiwiError(
          'CONTEXT_EXCEEDED',
          `this model's context holds ${context} tokens, but the prompt has ${c.prompt.ids.length} and the completion needs at least one; shorten the prompt`,
          { param: null },
        );
      }
    }
    if (s.logitBias !== undefined) checkTokenIds(backend, [...s.logitBias.keys()], 'logit_bias');
    const release = await admit(req);
    const baseSeed = s.seed ?? randomInt(2 ** 31);
    const sampling = (i: number): SamplingOptions => ({
      ...DEFAULT_SAMPLING,
      temperature: s.temperature,
      topK: s.topK,
      topP: s.topP,
      minP: s.minP,
      repetitionPenalty: s.repeatPenalty,
      presencePenalty: s.presencePenalty,
      frequencyPenalty: s.frequencyPenalty,
      penaltyWindow: PENALTY_WINDOW,
      // Each choice draws its own stream: the same seed gives the same n choices, which differ from each other.
      seed: (baseSeed + i) % 2 ** 31,
      ...(s.logitBias !== undefined ? { logitBias: s.logitBias } : {}),
      ...(topLogprobs !== undefined ? { topLogprobs } : {}),
    });
    const runs = choices.map((c, i): Run => {
      // max_tokens beyond the context is clamped to what is left: the choice ends with 'length' there (llama-server's rule).
      const room = context - c.prompt.ids.length;
      const maxTokens = Math.min(s.maxTokens ?? room, room);
      return { events: backend.generate({ promptIds: c.prompt.ids, maxTokens, sampling: sampling(i), stop: s.stop, ...(grammar !== undefined ? { grammar } : {}) }, req.signal), stop: s.stop };
    });
    return { runs, includeUsage: s.includeUsage, release, signal: req.signal, sampling };
  }

  async function admit(req: ApiRequest): Promise<() => void> {
    const acquired = await queue.acquire(req.signal);
    let released = false;
    const onAbort = (): void => release();
    const release = (): void => {
      if (released) return;
      released = true;
      req.signal.removeEventListener('abort', onAbort);
      acquired();
    };
    req.signal.addEventListener('abort', onAbort, { once: true });
    return release;
  }

  async function collectAll(job: Job): Promise<CollectResult[]> {
    try {
      return await Promise.all(job.runs.map((run) => collect(run, backend)));
    } finally {
      job.release();
    }
  }

  async function scorePrompt(job: Job, prompt: PreparedPrompt, topLogprobs: number): Promise<TokenInfo[]> {
    const first: TokenInfo = { id: prompt.ids[0]!, text: backend.tokenPiece?.(prompt.ids[0]!) ?? '' };
    if (prompt.ids.length === 1) return [first];
    const sampling = { ...job.sampling(0), temperature: 0, forcedIds: prompt.ids.slice(1), topLogprobs, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 };
    const tokens: TokenInfo[] = [first];
    for await (const e of backend.generate({ promptIds: prompt.ids.slice(0, 1), maxTokens: prompt.ids.length - 1, sampling, stop: [] }, job.signal)) {
      if (e.type === 'token') tokens.push(tokenInfo(backend, e.id, e.text, e.logprobs));
    }
    return tokens;
  }

  return { start, admit, collectAll, scorePrompt };
}
