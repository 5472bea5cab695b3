// The CompletionBackend of a model running in this process: the runtime's stage chain driven by a
// BatchGenerator, the model's tokenizer and chat template. This is the only server module that
// knows the runtime's API; the ring pipeline will be another CompletionBackend.
import { basename } from 'node:path';
import { KiwiError } from '../errors.js';
import { chatTemplateForModel, chatTokensOf, compileChatTemplate } from '../model/chat-template.js';
import type { ChatTemplate } from '../model/chat-template.js';
import { BatchGenerator } from '../runtime/generation.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import { promptCacheHealth } from '../runtime/prefix-cache.js';
import { speculativeHealth, type SpeculativeMode } from '../runtime/speculative.js';
import { openLocalModel } from '../runtime/local-model.js';
import { openDraftModel, type DraftModelDrafter } from '../runtime/draft-model.js';
import type { LocalModel, LocalModelOptions } from '../runtime/local-model.js';
import { attentionHeadDim } from '../runtime/stage-graph.js';
import { fimTokensOf, preparePrompt, streamGeneration, type RunningGenerations } from '../completion/backend-stream.js';
import { checkPromptSize } from '../completion/prompt-size.js';
import { prepareOffThread } from '../completion/prompt-prepare.js';
import { OffThreadEncoder } from '../model/tokenizer/off-thread-encoder.js';
import { embedWithChain } from '../completion/embedding-pool.js';
import type { BackendStatus, CompletionBackend, GenerationEvent, GenerationRequest, PreparedPrompt, PromptInput } from '../completion/completion-backend.js';

export interface LocalBackendOptions extends LocalModelOptions {
  /** The name clients use; default the file name without `.gguf`. */
  modelId?: string;
  /** Most requests decoded in one forward pass. Default 8. */
  maxBatch?: number;
  /** KV-cache budget of the pool; it always holds at least one full context. Default 1 GiB. */
  kvBudgetBytes?: number;
  /** The prompt cache's bound (KV bytes of recent prompts, inside the pool); 0 or absent: off. */
  promptCacheBytes?: number;
  /** Speculative decoding (runtime/speculative.ts); default off. */
  speculative?: SpeculativeMode;
  /** A small model of the same vocabulary that drafts for speculative decoding (runtime/draft-model.ts). */
  draftModel?: string;
  /** A Jinja chat template that replaces the model's (kiwi serve --chat-template). */
  chatTemplate?: string;
}

const KV_BLOCK_TOKENS = 16;
const DEFAULT_KV_BUDGET_BYTES = 1024 ** 3;

interface Loaded {
  model: LocalModel;
  template: ChatTemplate;
  pool: KvBlockPool;
  generator: BatchGenerator;
  drafter: DraftModelDrafter | undefined;
}

export class LocalBackend implements CompletionBackend {
  readonly modelId: string;
  createdAt = 0;
  private state: BackendStatus = 'starting';
  private loaded: Loaded | undefined;
  /** Cancels and settles every running generation (on close). */
  private readonly running: RunningGenerations = new Map();
  private readonly counts = { completed: 0, cancelled: 0, failed: 0 };
  /** Tokenizes long prompts off the event loop; started on the first one. */
  private encoder: OffThreadEncoder | undefined;

  constructor(
    readonly modelPath: string,
    private readonly opts: LocalBackendOptions = {},
  ) {
    this.modelId = opts.modelId ?? basename(modelPath).replace(/\.gguf$/i, '');
  }

  /** Constructs and loads in one step. */
  static async open(modelPath: string, opts: LocalBackendOptions = {}): Promise<LocalBackend> {
    const backend = new LocalBackend(modelPath, opts);
    await backend.load();
    return backend;
  }

  async load(): Promise<void> {
    if (this.loaded !== undefined || this.state !== 'starting') throw new Error('LocalBackend.load called twice');
    let model: LocalModel;
    try {
      model = await openLocalModel(this.modelPath, this.opts);
    } catch (err) {
      this.state = 'unavailable';
      throw err;
    }
    let drafter: DraftModelDrafter | undefined;
    try {
      // The draft model runs as the model does (provider, threads, shard cache), whole and over the same context.
      const { split: _split, ...stageOptions } = this.opts;
      if (this.opts.draftModel !== undefined) drafter = await openDraftModel(this.opts.draftModel, model.tokenizer, { ...stageOptions, maxPositions: model.chain.maxPositions });
    } catch (err) {
      this.state = 'unavailable';
      await model.dispose();
      throw err;
    }
    if (this.state !== 'starting') {
      // close() was called while the model loaded.
      await drafter?.dispose();
      await model.dispose();
      throw new KiwiError('API_SHUTTING_DOWN', 'the backend was closed while the model was loading');
    }
    const { shape } = model;
    // Per position: K and V of every layer, [kvHeads, headDim] f32 each (the runtime's KvCache).
    const bytesPerToken = 2 * shape.blockCount * shape.kvHeads * attentionHeadDim(shape) * 4;
    const context = model.chain.maxPositions;
    const budgetBlocks = Math.floor((this.opts.kvBudgetBytes ?? DEFAULT_KV_BUDGET_BYTES) / (bytesPerToken * KV_BLOCK_TOKENS));
    const pool = new KvBlockPool(Math.max(Math.ceil(context / KV_BLOCK_TOKENS), budgetBlocks), KV_BLOCK_TOKENS, bytesPerToken);
    this.loaded = {
      model,
      template:
        this.opts.chatTemplate !== undefined
          ? compileChatTemplate(this.opts.chatTemplate, 'model', chatTokensOf(model.tokenizer)) // an override counts as the model's own
          : chatTemplateForModel(model.file.metadata, chatTokensOf(model.tokenizer)),
      pool,
      generator: new BatchGenerator(model.chain, pool, {
        maxBatch: this.opts.maxBatch ?? 8,
        promptCacheBytes: this.opts.promptCacheBytes ?? 0,
        ...(this.opts.speculative !== undefined ? { speculative: this.opts.speculative } : {}),
        ...(drafter !== undefined ? { drafter } : {}),
      }),
      drafter,
    };
    this.createdAt = Math.floor(Date.now() / 1000);
    this.state = 'serving';
  }

  status(): BackendStatus {
    return this.state;
  }

  get contextTokens(): number {
    return this.loaded?.model.chain.maxPositions ?? 0;
  }

  /** The KV block pool (free vs total blocks shows what running requests hold). */
  get kvPool(): KvBlockPool {
    return this.ready().pool;
  }

  /** Requests that wait for KV blocks before they can be prefilled. */
  waitingForAdmission(): number {
    return this.loaded?.generator.waitingForKv ?? 0;
  }

  /** For GET /health: generations so far by how they ended (a refused request starts none). */
  health(): Record<string, unknown> {
    const { completed, cancelled, failed } = this.counts;
    return { generations: { completed, cancelled, failed }, ...promptCacheHealth(this.loaded?.generator.promptCacheStats), ...speculativeHealth(this.loaded?.generator.speculation) };
  }

  /** Generations so far by how they ended; how many run now and how many wait for KV blocks. */
  stats(): { running: number; waiting: number; completed: number; cancelled: number; failed: number } {
    const waiting = this.waitingForAdmission();
    return { running: this.running.size - waiting, waiting, ...this.counts };
  }

  /** Where the chat template came from: the model's metadata or a fallback. */
  get chatTemplateSource(): ChatTemplate['source'] {
    return this.ready().template.source;
  }

  get trainContextTokens(): number {
    return this.loaded?.model.shape.contextLength ?? 0;
  }

  get vocabSize(): number {
    return this.loaded?.model.tokenizer.vocabSize ?? 0;
  }

  chatTemplate(): { source: string; template: string } {
    const { template } = this.ready();
    return { source: this.opts.chatTemplate !== undefined ? 'override' : template.source, template: template.template };
  }

  /** Long texts are encoded on the tokenizer worker, as prompts are (POST /tokenize takes up to 4M characters). */
  tokenize(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): Promise<number[]> {
    const { model } = this.ready();
    this.encoder ??= new OffThreadEncoder(model.tokenizer, model.file.metadata);
    return this.encoder.encode(text, { addBos: opts.addSpecial, parseSpecial: opts.parseSpecial });
  }

  detokenize(ids: readonly number[]): string {
    return this.ready().model.tokenizer.decode(ids);
  }

  fimTokens(): { prefix: string; suffix: string; middle: string } | undefined {
    return fimTokensOf(this.ready().model.tokenizer);
  }

  tokenPiece(id: number): string {
    return Buffer.from(this.ready().model.tokenizer.tokenPiece(id)).toString('utf8');
  }

  /** Pooled embedding of one input, holding KV blocks for its length while it runs. */
  async embed(ids: readonly number[], signal: AbortSignal): Promise<Float32Array> {
    const { model, pool } = this.ready();
    const reservation = await pool.reserve(ids.length, { signal });
    try {
      return await embedWithChain(model.chain, ids);
    } finally {
      pool.release(reservation);
    }
  }

  prepare(prompt: PromptInput): PreparedPrompt {
    const { model, template } = this.ready();
    // A prompt that cannot fit is refused before tokenizing it would hold the event loop.
    checkPromptSize(model.tokenizer, prompt, this.contextTokens);
    return preparePrompt(model.tokenizer, template, prompt);
  }

  /** prepare() with long prompts tokenized on a worker thread (the API uses this). */
  async prepareAsync(prompt: PromptInput): Promise<PreparedPrompt> {
    const { model, template } = this.ready();
    checkPromptSize(model.tokenizer, prompt, this.contextTokens);
    this.encoder ??= new OffThreadEncoder(model.tokenizer, model.file.metadata);
    return prepareOffThread(model.tokenizer, template, prompt, this.encoder);
  }

  async *generate(request: GenerationRequest, signal: AbortSignal): AsyncGenerator<GenerationEvent> {
    const { model, generator } = this.ready();
    yield* streamGeneration(generator, model.tokenizer, request, signal, { counts: this.counts, running: this.running });
  }

  /** Cancels running generations, waits for them to let go of the model, and frees it. */
  async close(): Promise<void> {
    if (this.state === 'unavailable' && this.loaded === undefined) return;
    this.state = 'unavailable';
    const loaded = this.loaded;
    this.loaded = undefined;
    for (const stop of this.running.keys()) stop(new KiwiError('API_SHUTTING_DOWN', 'the server is shutting down'));
    await Promise.all(this.running.values());
    await this.encoder?.close();
    this.encoder = undefined;
    await loaded?.drafter?.dispose();
    await loaded?.model.dispose();
  }

  private ready(): Loaded {
    if (this.loaded === undefined) {
      throw new KiwiError('API_NOT_SERVING', this.state === 'starting' ? 'the model is still loading; retry in a moment' : 'the model is not available');
    }
    return this.loaded;
  }
}
