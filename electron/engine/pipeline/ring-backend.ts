// The CompletionBackend of the ring: the OpenAI server on the host serves through it exactly as it
// serves a local model. Tokenization and the chat template run here on the host (the head);
// generation runs through the RingGenerator. 'starting' until the session host attaches a ready
// ring, 'unavailable' once the ring broke or the host closes.
import { KiwiError } from '../errors.js';
import { chatTemplateForModel, chatTokensOf, encodeChatPrompt, type ChatTemplate } from '../model/chat-template.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import { Sampler } from '../runtime/sampling.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
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
  private readonly running = new Map<(reason: unknown) => void, Promise<unknown>>();
  readonly counts = { completed: 0, cancelled: 0, failed: 0 };

  constructor(readonly modelId: string) {}

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
    const { tokenizer: tok, template } = this.ready();
    let ids: number[];
    let text: string;
    switch (prompt.kind) {
      case 'chat':
        ({ text, ids } = encodeChatPrompt(tok, template, prompt.messages.map((m) => ({ role: m.role === 'developer' ? 'system' : m.role, content: m.content }))));
        break;
      case 'text':
        text = prompt.text;
        ids = tok.encode(text, { parseSpecial: true });
        break;
      case 'ids':
        for (const id of prompt.ids) {
          if (id >= tok.vocabSize) throw new KiwiError('TOKEN_INVALID', `prompt token ${id} is outside the vocabulary of ${tok.vocabSize} tokens`, { param: 'prompt' });
        }
        ids = [...prompt.ids];
        text = tok.decode(ids, { special: true });
        break;
    }
    if (ids.length === 0) throw new KiwiError('API_BAD_REQUEST', 'the prompt is empty; give at least one token', { param: prompt.kind === 'chat' ? 'messages' : 'prompt' });
    return { ids, text };
  }

  async *generate(request: GenerationRequest, signal: AbortSignal): AsyncGenerator<GenerationEvent> {
    const { tokenizer: tok, generator } = this.ready();
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
    const done = generator
      .generate({
        promptIds: request.promptIds,
        maxTokens: request.maxTokens,
        sampler: new Sampler(request.sampling),
        isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
        decoder,
        stop: request.stop,
        signal: cancel.signal,
        onToken: (id, text) => {
          events.push({ type: 'token', id, text });
          notify();
        },
      })
      .then(
        (result) => {
          this.counts.completed++;
          events.push({ type: 'end', finishReason: result.finishReason, text: decoder.flush(), completionTokens: result.ids.length });
          notify();
        },
        (error: unknown) => {
          if (cancel.signal.aborted) this.counts.cancelled++;
          else this.counts.failed++;
          failure = { error };
          notify();
        },
      );
    this.running.set(stop, done);
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
      // A consumer that stops reading early cancels the generation, which frees its caches around the ring.
      if (!ended && !cancel.signal.aborted) stop(new KiwiError('API_CLIENT_CLOSED', 'the consumer stopped reading'));
      void done.then(() => this.running.delete(stop));
    }
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
