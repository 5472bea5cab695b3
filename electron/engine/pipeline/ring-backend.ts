// The CompletionBackend of the ring: the OpenAI server on the host serves through it exactly as it
// serves a local model. Tokenization and the chat template run here on the host (the head);
// generation runs through the RingGenerator. 'starting' until the session host attaches a ready
// ring, 'unavailable' once the ring broke or the host closes.
import { KiwiError } from '../errors.js';
import { chatTemplateForModel, chatTokensOf, type ChatTemplate } from '../model/chat-template.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { preparePrompt, streamGeneration, type RunningGenerations } from '../server/backend-stream.js';
import type { BackendStatus, CompletionBackend, GenerationEvent, GenerationRequest, PreparedPrompt, PromptInput } from '../server/completion-backend.js';
import type { RingGenerator } from './ring-generator.js';

export interface RingModel {
  file: GgufFile;
  tokenizer: Tokenizer;
  generator: RingGenerator;
  contextTokens: number;
}

interface Attached extends RingModel {
  template: ChatTemplate;
}

export class RingBackend implements CompletionBackend {
  createdAt = 0;
  private state: BackendStatus = 'starting';
  private ring: Attached | undefined;
  private readonly running: RunningGenerations = new Map();
  readonly counts = { completed: 0, cancelled: 0, failed: 0 };
  /** The ring's state for GET /health (set by the session host). */
  ringHealth: () => Record<string, unknown> = () => ({});

  constructor(readonly modelId: string) {}

  health(): Record<string, unknown> {
    return this.ringHealth();
  }

  /** Starts serving through a ready ring. */
  attach(model: RingModel): void {
    this.ring = { ...model, template: chatTemplateForModel(model.file.metadata, chatTokensOf(model.tokenizer)) };
    this.createdAt = Math.floor(Date.now() / 1000);
    this.state = 'serving';
  }

  /** Stops taking requests (the ring broke); running ones fail with their ring error. */
  detach(): void {
    this.ring = undefined;
    this.state = 'unavailable';
  }

  status(): BackendStatus {
    return this.state;
  }

  get contextTokens(): number {
    return this.ring?.contextTokens ?? 0;
  }

  waitingForAdmission(): number {
    return this.ring?.generator.waitingForKv ?? 0;
  }

  prepare(prompt: PromptInput): PreparedPrompt {
    const { tokenizer, template } = this.ready();
    return preparePrompt(tokenizer, template, prompt);
  }

  async *generate(request: GenerationRequest, signal: AbortSignal): AsyncGenerator<GenerationEvent> {
    const { tokenizer, generator } = this.ready();
    yield* streamGeneration(generator, tokenizer, request, signal, { counts: this.counts, running: this.running });
  }

  /** Cancels running generations and waits for them to settle. */
  async close(): Promise<void> {
    this.state = 'unavailable';
    for (const stop of this.running.keys()) stop(new KiwiError('API_SHUTTING_DOWN', 'the server is shutting down'));
    await Promise.all(this.running.values());
    this.ring = undefined;
  }

  private ready(): Attached {
    if (this.ring === undefined) {
      throw new KiwiError('API_NOT_SERVING', this.state === 'starting' ? 'the session is still forming its ring; retry in a moment' : 'the ring is not available');
    }
    return this.ring;
  }
}
