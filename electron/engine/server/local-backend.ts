// The CompletionBackend of a model running in this process: the runtime's stage chain driven by a
// BatchGenerator, the model's tokenizer and chat template. This is the only server module that
// knows the runtime's API; the ring pipeline will be another CompletionBackend.
import { basename } from 'node:path';
import { KiwiError } from '../errors.js';
import { chatTemplateForModel, chatTokensOf } from '../model/chat-template.js';
import type { ChatTemplate } from '../model/chat-template.js';
import { BatchGenerator } from '../runtime/generation.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import { openLocalModel } from '../runtime/local-model.js';
import type { LocalModel, LocalModelOptions } from '../runtime/local-model.js';
import { attentionHeadDim } from '../runtime/stage-graph.js';
import { preparePrompt, streamGeneration, type RunningGenerations } from './backend-stream.js';
import type { BackendStatus, CompletionBackend, GenerationEvent, GenerationRequest, PreparedPrompt, PromptInput } from './completion-backend.js';

export interface LocalBackendOptions extends LocalModelOptions {
  /** The name clients use; default the file name without `.gguf`. */
  modelId?: string;
  /** Most requests decoded in one forward pass. Default 8. */
  maxBatch?: number;
  /** KV-cache budget of the pool; it always holds at least one full context. Default 1 GiB. */
  kvBudgetBytes?: number;
}

const KV_BLOCK_TOKENS = 16;
const DEFAULT_KV_BUDGET_BYTES = 1024 ** 3;

interface Loaded {
  model: LocalModel;
  template: ChatTemplate;
  pool: KvBlockPool;
  generator: BatchGenerator;
}

export class LocalBackend implements CompletionBackend {
  readonly modelId: string;
  createdAt = 0;
  private state: BackendStatus = 'starting';
  private loaded: Loaded | undefined;
  /** Cancels and settles every running generation (on close). */
  private readonly running: RunningGenerations = new Map();
  private readonly counts = { completed: 0, cancelled: 0, failed: 0 };

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
    if (this.state !== 'starting') {
      // close() was called while the model loaded.
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
      template: chatTemplateForModel(model.file.metadata, chatTokensOf(model.tokenizer)),
      pool,
      generator: new BatchGenerator(model.chain, pool, { maxBatch: this.opts.maxBatch ?? 8 }),
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

  /** Generations so far by how they ended; how many run now and how many wait for KV blocks. */
  stats(): { running: number; waiting: number; completed: number; cancelled: number; failed: number } {
    const waiting = this.waitingForAdmission();
    return { running: this.running.size - waiting, waiting, ...this.counts };
  }

  /** Where the chat template came from: the model's metadata or a fallback. */
  get chatTemplateSource(): ChatTemplate['source'] {
    return this.ready().template.source;
  }

  prepare(prompt: PromptInput): PreparedPrompt {
    const { model, template } = this.ready();
    return preparePrompt(model.tokenizer, template, prompt);
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
    await loaded?.model.dispose();
  }

  private ready(): Loaded {
    if (this.loaded === undefined) {
      throw new KiwiError('API_NOT_SERVING', this.state === 'starting' ? 'the model is still loading; retry in a moment' : 'the model is not available');
    }
    return this.loaded;
  }
}
