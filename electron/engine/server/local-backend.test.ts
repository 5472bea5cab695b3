// The in-process CompletionBackend on stories260K: prompts as the API gives them, cancellation that
// frees KV blocks (also for a request still waiting for them), and close() ending everything.
import { describe, expect, test } from 'vitest';
import { isKiwiError } from '../errors.js';
import { testModelPath } from '../model/test-models.js';
import { DEFAULT_SAMPLING } from '../runtime/sampling.js';
import type { GenerationEvent } from '../completion/completion-backend.js';
import { LocalBackend } from './local-backend.js';
import { eventually } from './test-helpers.js';

async function open(opts: ConstructorParameters<typeof LocalBackend>[1] = {}): Promise<LocalBackend> {
  return LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1, ...opts });
}

async function drain(events: AsyncIterable<GenerationEvent>): Promise<GenerationEvent[]> {
  const out: GenerationEvent[] = [];
  for await (const e of events) out.push(e);
  return out;
}

describe('LocalBackend', () => {
  test('is starting before load, serving after, unavailable after close', async () => {
    const b = new LocalBackend(await testModelPath('stories260K.gguf'), { threads: 1 });
    expect(b.status()).toBe('starting');
    expect(b.modelId).toBe('stories260K');
    expect(() => b.prepare({ kind: 'text', text: 'x' })).toThrow(expect.objectContaining({ code: 'API_NOT_SERVING' }));
    await b.load();
    expect(b.status()).toBe('serving');
    expect(b.contextTokens).toBe(2048);
    await b.close();
    expect(b.status()).toBe('unavailable');
  });

  test('prepares chat prompts with the fallback template and one BOS, and checks token ids', async () => {
    const b = await open();
    try {
      expect(b.chatTemplateSource).toBe('plain');
      const p = b.prepare({ kind: 'chat', messages: [{ role: 'developer', content: 'Be kind.' }, { role: 'user', content: 'Hi' }] });
      expect(p.text).toBe('Be kind.\n\nUser: Hi\nAssistant:');
      expect(p.ids[0]).toBe(1);
      expect(p.ids.filter((id) => id === 1)).toHaveLength(1);
      expect(() => b.prepare({ kind: 'ids', ids: [1, 512] })).toThrow(expect.objectContaining({ code: 'TOKEN_INVALID' }));
    } finally {
      await b.close();
    }
  });

  test('ends with the finish reason and the number of tokens it generated', async () => {
    const b = await open();
    try {
      const promptIds = b.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
      const events = await drain(b.generate({ promptIds, maxTokens: 10, sampling: DEFAULT_SAMPLING, stop: [] }, new AbortController().signal));
      expect(events.filter((e) => e.type === 'token')).toHaveLength(10);
      expect(events.at(-1)).toMatchObject({ type: 'end', finishReason: 'length', completionTokens: 10 });
      expect(b.kvPool.freeBlocks).toBe(b.kvPool.totalBlocks);
    } finally {
      await b.close();
    }
  });

  test('a consumer that stops reading early frees the KV blocks', async () => {
    const b = await open();
    try {
      const promptIds = b.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
      for await (const e of b.generate({ promptIds, maxTokens: 1000, sampling: DEFAULT_SAMPLING, stop: [] }, new AbortController().signal)) {
        if (e.type === 'token') break;
      }
      await eventually(() => b.kvPool.freeBlocks === b.kvPool.totalBlocks, 'the blocks are free');
    } finally {
      await b.close();
    }
  });

  test('close() ends a running request and one waiting for KV blocks', async () => {
    // A budget of one byte: the pool holds exactly one context, so the second request must wait.
    const b = await open({ kvBudgetBytes: 1 });
    const promptIds = b.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
    const running = b.generate({ promptIds, maxTokens: 2000, sampling: DEFAULT_SAMPLING, stop: [] }, new AbortController().signal)[Symbol.asyncIterator]();
    await running.next();
    const waiting = drain(b.generate({ promptIds, maxTokens: 100, sampling: DEFAULT_SAMPLING, stop: [] }, new AbortController().signal));
    const ended = (async () => {
      for (;;) if ((await running.next()).done === true) return;
    })();
    const outcomes = Promise.allSettled([ended, waiting]);
    await b.close();
    for (const o of await outcomes) {
      expect(o.status).toBe('rejected');
      expect(isKiwiError(o.status === 'rejected' ? o.reason : undefined, 'API_SHUTTING_DOWN')).toBe(true);
    }
  });
});
