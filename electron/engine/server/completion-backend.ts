// What the OpenAI server needs from whatever runs the model: today a model in this process
// (local-backend.ts), later the distributed ring. The server knows nothing else about the engine.
import type { SamplingOptions } from '../runtime/sampling.js';

export type BackendStatus = 'starting' | 'serving' | 'unavailable';

export interface ChatTurn {
  role: string;
  content: string;
}

/** A prompt as the API received it; the backend owns tokenization and the chat template. */
export type PromptInput = { kind: 'chat'; messages: readonly ChatTurn[] } | { kind: 'text'; text: string } | { kind: 'ids'; ids: readonly number[] };

export interface PreparedPrompt {
  ids: number[];
  /** The prompt as text (for `echo`). */
  text: string;
}

export interface GenerationRequest {
  promptIds: readonly number[];
  maxTokens: number;
  sampling: SamplingOptions;
  /** The backend may end early with finish reason 'stop' once its text contains one of these. */
  stop: readonly string[];
}

export type FinishReason = 'stop' | 'length';

/** Events of one generation, in order: tokens, then exactly one `end` (or the iterable throws). */
export type GenerationEvent =
  | { type: 'token'; id: number; /** Text completed by this token ('' inside a multi-byte character). */ text: string }
  | { type: 'end'; finishReason: FinishReason; /** Text still held by the decoder. */ text: string; completionTokens: number };

export interface CompletionBackend {
  /** The name clients pass as `model`. */
  readonly modelId: string;
  /** Unix seconds at which the model was loaded. */
  readonly createdAt: number;
  /** Positions one request may use (prompt + completion). */
  readonly contextTokens: number;
  status(): BackendStatus;
  /** Requests started with generate() that still wait for admission (KV blocks) and do not run yet. */
  waitingForAdmission?(): number;
  /** More for GET /health, e.g. a ring re-planning after a member left (requests wait meanwhile). */
  health?(): Record<string, unknown>;
  /** Tokenizes (rendering chat messages with the model's template); throws KiwiError on bad input. */
  prepare(prompt: PromptInput): PreparedPrompt;
  /**
   * Runs one generation. Aborting `signal` ends it and frees everything it holds (KV blocks);
   * the iterable then throws the abort reason.
   */
  generate(request: GenerationRequest, signal: AbortSignal): AsyncIterable<GenerationEvent>;
}
