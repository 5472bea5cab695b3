import { afterAll, describe, expect, it } from 'vitest';
import { openGguf } from '../gguf/gguf-reader.js';
import { testModelPath } from '../test-models.js';
import { OffThreadEncoder } from './off-thread-encoder.js';
import { createTokenizer } from './tokenizer.js';

const encoders: OffThreadEncoder[] = [];
afterAll(async () => {
  for (const e of encoders) await e.close();
});

async function setup(path: string): Promise<{ encoder: OffThreadEncoder; tok: ReturnType<typeof createTokenizer> }> {
  const { metadata } = await openGguf(await testModelPath(path));
  const tok = createTokenizer(metadata);
  const encoder = new OffThreadEncoder(tok, metadata);
  encoders.push(encoder);
  return { encoder, tok };
}

const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. ';
const long = `${story.repeat(400)}<s> ünïcödé 🥝 \n\n\t  spaces   ${story.repeat(100)}`;

describe('OffThreadEncoder', () => {
  it.each(['stories260K.gguf', 'vocab/ggml-vocab-llama-spm.gguf'])('gives exactly the ids of encode() for %s, on a worker thread', async (path) => {
    const { encoder, tok } = await setup(path);
    for (const options of [{ parseSpecial: true }, { parseSpecial: true, addBos: false }, {}]) {
      expect(await encoder.encode(long, options)).toEqual(tok.encode(long, options));
    }
    expect(encoder.running).toBe(true);
    expect(await encoder.encode('short', { parseSpecial: true })).toEqual(tok.encode('short', { parseSpecial: true }));
  });

  it('keeps the event loop turning while it encodes a long text', async () => {
    const { encoder } = await setup('stories260K.gguf');
    await encoder.encode(long); // the worker is up
    let turns = 0;
    let done = false;
    const spin = (): void => {
      turns++;
      if (!done) setImmediate(spin);
    };
    setImmediate(spin);
    await encoder.encode(long.repeat(4));
    done = true;
    // encode() on this thread would have resolved before the first immediate ran.
    expect(turns).toBeGreaterThan(1);
  });
});
