// POST /v1/embeddings in-process against stories260K, whole and split into stages.
import { describe, expect, test } from 'vitest';
import { testModelPath } from '../../model/test-models.js';
import { LocalBackend } from '../local-backend.js';
import { withStoriesApi } from '../test-helpers.js';

let backend: LocalBackend;
const { call } = withStoriesApi((s) => (backend = s.backend));


describe('embeddings', () => {
  test('one unit vector of the hidden size per input, the same for the same text, as floats or base64', async () => {
    const r = await call('POST', '/v1/embeddings', { model: 'stories260K', input: ['Once upon a time', 'The cat sat', 'Once upon a time'] });
    expect(r.status).toBe(200);
    const vs = r.json.data.map((d: any) => d.embedding as number[]);
    expect(r.json.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    expect(vs[0]).toHaveLength(64);
    expect(Math.hypot(...vs[0])).toBeCloseTo(1, 5);
    expect(vs[2]).toEqual(vs[0]);
    expect(vs[1]).not.toEqual(vs[0]);
    expect(r.json.usage.prompt_tokens).toBeGreaterThan(0);
    const b = await call('POST', '/v1/embeddings', { input: 'Once upon a time', encoding_format: 'base64' });
    const bytes = Buffer.from(b.json.data[0].embedding as string, 'base64');
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(vs[0]);
    expect((await call('POST', '/v1/embeddings', { input: 'x', dimensions: 32 })).json.error.param).toBe('dimensions');
  });

  test('a model split into stages gives the same embedding', async () => {
    const split = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1, split: [{ start: 0, end: 2 }, { start: 2, end: 5 }] });
    try {
      const ids = backend.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
      const whole = await backend.embed(ids, new AbortController().signal);
      const parts = await split.embed(ids, new AbortController().signal);
      for (let i = 0; i < whole.length; i++) expect(parts[i]!).toBeCloseTo(whole[i]!, 5);
    } finally {
      await split.close();
    }
  });
});
