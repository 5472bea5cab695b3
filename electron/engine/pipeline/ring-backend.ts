// The CompletionBackend of the ring: the OpenAI server on the host serves through it exactly as it
// serves a local model. Tokenization and the chat template run here on the host (the head);
// generation runs through the RingGenerator. 'starting' until the session host attaches a ready
// ring, 'unavailable' once the ring broke or the host closes.
import { KiwiError } from '../errors.js';
import { chatTemplateForModel, chatTokensOf, compileChatTemplate, type ChatTemplate } from '../model/chat-template.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { metaInteger, metaString } from '../model/gguf/gguf-metadata.js';
import { fimTokensOf, preparePrompt, streamGeneration, type RunningGenerations } from '../completion/backend-stream.js';
import { checkPromptSize } from '../completion/prompt-size.js';
import { prepareOffThread } from '../completion/prompt-prepare.js';
import { OffThreadEncoder } from '../model/tokenizer/off-thread-encoder.js';
import type { BackendStatus, CompletionBackend, GenerationEvent, GenerationRequest, PreparedPrompt, PromptInput } from '../completion/completion-backend.js';
import { meanPoolNormalized } from '../completion/embedding-pool.js';
import { promptCacheHealth } from '../runtime/prefix-cache.js';
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
  /** Tokenizes long prompts off the event loop, for the ring's tokenizer; started on the first one. */
  private encoder: { tokenizer: Tokenizer; encoder: OffThreadEncoder } | undefined;
  private readonly running: RunningGenerations = new Map();
  readonly counts = { completed: 0, cancelled: 0, failed: 0 };
  /** A Jinja chat template that replaces the model's (kiwi host --chat-template); set before the ring attaches. */
  chatTemplateOverride: string | undefined;
  /** The ring's state for GET /health (set by the session host). */
  ringHealth: () => Record<string, unknown> = () => ({});

  constructor(readonly modelId: string) {}

  health(): Record<string, unknown> {
    return { ...this.ringHealth(), ...promptCacheHealth(this.ring?.generator.promptCacheStats) };
  }

  /** Starts serving through a ready ring. */
  attach(model: RingModel): void {
    const tokens = chatTokensOf(model.tokenizer);
    const template =
      this.chatTemplateOverride !== undefined ? compileChatTemplate(this.chatTemplateOverride, 'model', tokens) : chatTemplateForModel(model.file.metadata, tokens);
    this.ring = { ...model, template };
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

  get trainContextTokens(): number {
    const meta = this.ring?.file.metadata;
    const arch = meta !== undefined ? metaString(meta, 'general.architecture') : undefined;
    return (arch !== undefined && meta !== undefined ? metaInteger(meta, `${arch}.context_length`) : undefined) ?? this.contextTokens;
  }

  get vocabSize(): number {
    return this.ring?.tokenizer.vocabSize ?? 0;
  }

  chatTemplate(): { source: string; template: string } {
    const { template } = this.ready();
    return { source: template.source, template: template.template };
  }

  /** Long texts are encoded on the tokenizer worker, as prompts are (POST /tokenize takes up to 4M characters). */
  tokenize(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): Promise<number[]> {
    return this.offThread().encode(text, { addBos: opts.addSpecial, parseSpecial: opts.parseSpecial });
  }

  detokenize(ids: readonly number[]): string {
    return this.ready().tokenizer.decode(ids);
  }

  fimTokens(): { prefix: string; suffix: string; middle: string } | undefined {
    return fimTokensOf(this.ready().tokenizer);
  }

  tokenPiece(id: number): string {
    return Buffer.from(this.ready().tokenizer.tokenPiece(id)).toString('utf8');
  }

  prepare(prompt: PromptInput): PreparedPrompt {
    const { tokenizer, template } = this.ready();
    // A prompt that cannot fit is refused before tokenizing it would hold the event loop.
    checkPromptSize(tokenizer, prompt, this.contextTokens);
    return preparePrompt(tokenizer, template, prompt);
  }

  /** prepare() with long prompts tokenized on a worker thread (the API uses this). */
  async prepareAsync(prompt: PromptInput): Promise<PreparedPrompt> {
    const { tokenizer, template } = this.ready();
    checkPromptSize(tokenizer, prompt, this.contextTokens);
    return prepareOffThread(tokenizer, template, prompt, this.offThread());
  }

  /** The worker encoder for the ring's current tokenizer (a new ring may bring a new model). */
  private offThread(): OffThreadEncoder {
    const { tokenizer, file } = this.ready();
    if (this.encoder?.tokenizer !== tokenizer) {
      void this.encoder?.encoder.close();
      this.encoder = { tokenizer, encoder: new OffThreadEncoder(tokenizer, file.metadata) };
    }
    return this.encoder.encoder;
  }

  /** Pooled embedding of one input: the head (here on the host) gives its final norm of every position. */
  async embed(ids: readonly number[], signal: AbortSignal): Promise<Float32Array> {
    const { generator } = this.ready();
    const states = await generator.hiddenStates(ids, signal);
    return meanPoolNormalized(states, ids.length, states.length / ids.length);
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
    await this.encoder?.encoder.close();
    this.encoder = undefined;
    this.ring = undefined;
  }

  private ready(): Attached {
    if (this.ring === undefined) {
      throw new KiwiError('API_NOT_SERVING', this.state === 'starting' ? 'the session is still forming its ring; retry in a moment' : 'the ring is not available');
    }
    return this.ring;
  }
}
