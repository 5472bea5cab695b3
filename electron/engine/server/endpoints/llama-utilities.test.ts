// llama-server's /tokenize, /detokenize and /apply-template in-process against stories260K.
import { describe, expect, test } from 'vitest';
import type { LocalBackend } from '../local-backend.js';
import { withStoriesApi } from '../test-helpers.js';

let backend: LocalBackend;
const { call } = withStoriesApi((s) => (backend = s.backend));


describe("llama-server's utility endpoints", () => {
  test('/tokenize and /detokenize round-trip; with_pieces gives each piece', async () => {
    const t = await call('POST', '/tokenize', { content: 'Once upon a time' });
    expect(t.json.tokens).toEqual(await backend.tokenize('Once upon a time', { addSpecial: false, parseSpecial: true }));
    const d = await call('POST', '/detokenize', { tokens: t.json.tokens });
    expect(d.json.content).toBe('Once upon a time');
    const p = await call('POST', '/tokenize', { content: 'Once', with_pieces: true, add_special: true });
    expect(p.json.tokens[0]).toMatchObject({ id: 1 });
    expect(p.json.tokens.slice(1).map((x: any) => x.piece).join('')).toBe(' Once');
  });

  test('/apply-template renders the chat prompt the model would get', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const r = await call('POST', '/apply-template', { messages });
    expect(r.json.prompt).toBe(backend.prepare({ kind: 'chat', messages }).text);
  });
});
