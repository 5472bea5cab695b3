// What the OpenAI server needs from whatever runs the model: a model in this process
// (server/local-backend.ts) or the distributed ring (pipeline/ring-backend.ts). The server knows
// nothing else about the engine.
//
// completion/ is the contract's own layer, below both server/ (which serves a backend over HTTP)
// and pipeline/ (whose ring implements one), so that neither imports the other (ARCHITECTURE.md,
// "Dependency direction"). Beside the contract sits what every backend does the same way and both
// sides need: rendering a prompt input to ids (chat templates with tools: tool-prompt.ts,
// tool-syntax.ts), the prompt-size check, off-thread tokenizing, the token/end stream around a
// generator and mean-pooled embeddings. It imports runtime/ and model/, never server/ or pipeline/.
import type { JsonGrammar } from '../runtime/constrained/json-automaton.js';
import type { FinishReason } from '../runtime/generation-loop.js';
import type { SamplingOptions, TokenLogprobs } from '../runtime/sampling.js';
import type { ToolCallRecord } from './tool-prompt.js';
import type { ToolFunction, ToolSyntax } from './tool-syntax.js';

export type BackendStatus = 'starting' | 'serving' | 'unavailable';

export interface ChatTurn {
  role: string;
  content: string;
  /** An assistant turn's tool calls; a tool turn's call id (tool-prompt.ts). */
  tool_calls?: readonly ToolCallRecord[] | undefined;
  tool_call_id?: string | undefined;
  name?: string | undefined;
}

/** A prompt as the API received it; the backend owns tokenization and the chat template. */
export type PromptInput = { kind: 'chat'; messages: readonly ChatTurn[]; /** Tools offered to the model (rendered by the template). */ tools?: readonly ToolFunction[] | undefined } | { kind: 'text'; text: string } | { kind: 'ids'; ids: readonly number[] };

export interface PreparedPrompt {
  ids: number[];
  /** The prompt as text (for `echo`). */
  text: string;
  /** Chat prompts: how this model's template writes tool calls (tool-syntax.ts). */
  toolSyntax?: ToolSyntax;
}

export interface GenerationRequest {
  promptIds: readonly number[];
  maxTokens: number;
  sampling: SamplingOptions;
  /** The backend may end early with finish reason 'stop' once its text contains one of these. */
  stop: readonly string[];
  /** Constrained decoding (response_format, forced tool calls): only text of this grammar is generated. */
  grammar?: JsonGrammar | undefined;
}

/** Why a generation ended; declared once, by the generation loop (runtime/generation-loop.ts). */
export type { FinishReason } from '../runtime/generation-loop.js';

/** Events of one generation, in order: tokens, then exactly one `end` (or the iterable throws). */
export type GenerationEvent =
  | {
      type: 'token';
      id: number;
      /** Text completed by this token ('' inside a multi-byte character). */ text: string;
      /** With sampling.topLogprobs: the token's log-probability and the alternatives. */ logprobs?: TokenLogprobs | undefined;
    }
  | { type: 'end'; finishReason: FinishReason; /** Text still held by the decoder. */ text: string; completionTokens: number };

export interface CompletionBackend {
  /** The name clients pass as `model`. */
  readonly modelId: string;
  /** Unix seconds at which the model was loaded. */
  readonly createdAt: number;
  /** Positions one request may use (prompt + completion). */
  readonly contextTokens: number;
  /** The model's training context (GGUF `context_length`), for /v1/models. */
  readonly trainContextTokens?: number;
  /** Vocabulary size, to validate token ids (logit_bias, prompts). */
  readonly vocabSize?: number;
  status(): BackendStatus;
  /** Requests started with generate() that still wait for admission (KV blocks) and do not run yet. */
  waitingForAdmission?(): number;
  /** More for GET /health, e.g. a ring re-planning after a member left (requests wait meanwhile). */
  health?(): Record<string, unknown>;
  /** Tokenizes (rendering chat messages with the model's template); throws KiwiError on bad input. */
  prepare(prompt: PromptInput): PreparedPrompt;
  /** prepare() without holding the event loop on long prompts (a worker thread tokenizes them); the API prefers it. */
  prepareAsync?(prompt: PromptInput): Promise<PreparedPrompt>;
  /**
   * The embedding of a tokenized input: the mean over its positions of the final-norm hidden state,
   * L2-normalized (llama-server --embeddings --pooling mean). Absent where the backend cannot.
   */
  embed?(ids: readonly number[], signal: AbortSignal): Promise<Float32Array>;
  /** The vocabulary's fill-in-the-middle token texts (completions `suffix`); undefined when it has none. */
  fimTokens?(): { prefix: string; suffix: string; middle: string } | undefined;
  /** The chat template in use (for /apply-template and /props). */
  chatTemplate?(): { source: string; template: string };
  /** Token ids back to text (for /detokenize). */
  detokenize?(ids: readonly number[]): string;
  /** Raw text to ids with llama-server's /tokenize options. */
  tokenize?(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): Promise<number[]>;
  /** The text of one token (for /tokenize with_pieces and logprobs). */
  tokenPiece?(id: number): string;
  /**
   * Runs one generation. Aborting `signal` ends it and frees everything it holds (KV blocks);
   * the iterable then throws the abort reason.
   */
  generate(request: GenerationRequest, signal: AbortSignal): AsyncIterable<GenerationEvent>;
}
