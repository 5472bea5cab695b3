import { afterAll, describe, expect, it } from 'vitest';
import { chatTemplateForModel, chatTokensOf } from '../model/chat-template.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { OffThreadEncoder } from '../model/tokenizer/off-thread-encoder.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import { preparePrompt } from './backend-stream.js';
import type { PromptInput } from './completion-backend.js';
import { prepareOffThread } from './prompt-prepare.js';

const encoders: OffThreadEncoder[] = [];
afterAll(async () => {
  for (const e of encoders) await e.close();
});

const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside. ';

describe('prepareOffThread', () => {
  it.each(['stories260K.gguf', 'vocab/ggml-vocab-phi-3.gguf'])('prepares long and short prompts exactly as preparePrompt does, for %s', async (path) => {
    const { metadata } = await openGguf(await testModelPath(path));
    const tok = createTokenizer(metadata);
    const template = chatTemplateForModel(metadata, chatTokensOf(tok));
    const encoder = new OffThreadEncoder(tok, metadata);
    encoders.push(encoder);
    const prompts: PromptInput[] = [
      { kind: 'text', text: story.repeat(300) },
      { kind: 'text', text: 'Once' },
      { kind: 'chat', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: story.repeat(300) }, { role: 'assistant', content: 'Yes.' }, { role: 'user', content: 'More.' }] },
      { kind: 'chat', messages: [{ role: 'user', content: 'Hi' }] },
      { kind: 'ids', ids: [1, 2, 3] },
    ];
    for (const prompt of prompts) expect(await prepareOffThread(tok, template, prompt, encoder)).toEqual(preparePrompt(tok, template, prompt));
    // The long ones went to the worker.
    expect(encoder.running).toBe(true);
  });

  it('refuses what preparePrompt refuses', async () => {
    const { metadata } = await openGguf(await testModelPath('stories260K.gguf'));
    const tok = createTokenizer(metadata);
    const template = chatTemplateForModel(metadata, chatTokensOf(tok));
    const encoder = new OffThreadEncoder(tok, metadata);
    encoders.push(encoder);
    await expect(prepareOffThread(tok, template, { kind: 'ids', ids: [tok.vocabSize] }, encoder)).rejects.toMatchObject({ code: 'TOKEN_INVALID' });
  });
});
