import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf, readTensorBytes } from '../engine/model/gguf/gguf-reader.js';
import { GgmlType, tensorByteLength } from '../engine/model/gguf/gguf-types.js';
import { buildGguf, writableMetadata } from '../engine/model/gguf/gguf-writer.js';
import { testModelPath } from '../engine/model/test-models.js';
import { resolveShape } from '../engine/model/synth/shapes.js';
import { synthesizeModel } from '../engine/model/synth/synth.js';
import { LocalBackend } from '../engine/server/local-backend.js';
import { createOpenAiApi } from '../engine/server/openai-api.js';
import { runKiwi as run } from './test-support/run-kiwi.js';

let dir: string;
let model: string;
const env = process.env.KIWI_CACHE_DIR;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-generate-'));
  process.env.KIWI_CACHE_DIR = join(dir, 'cache');
  model = await testModelPath('stories260K.gguf');
});
afterAll(async () => {
  if (env === undefined) delete process.env.KIWI_CACHE_DIR;
  else process.env.KIWI_CACHE_DIR = env;
  await rm(dir, { recursive: true, force: true });
});

const base = () => ['generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '16', '--threads', '1', '--json'];

describe('kiwi generate', () => {
  test('prints text, prompt ids, ids and timings as one JSON line (greedy ids as llama.cpp)', async () => {
    const out = await run(base());
    expect(out.code).toBe(0);
    const lines = out.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const r = JSON.parse(lines[0]!);
    // Reference: node-llama-cpp 3.21.1, greedy, same prompt (see runtime/stories260k.test.ts).
    expect(r.prompt_ids).toEqual([1, 403, 407, 261, 378]);
    expect(r.ids).toEqual([432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337]);
    expect(r.text).toBe(', there was a little girl named Lily. She loved to play');
    expect(r.ttft_ms).toBeGreaterThan(0);
    expect(r.tokens_per_s).toBeGreaterThan(0);
  });

  test('--json text equals the text the API returns for the same greedy request', async () => {
    // The first generated piece is '▁little': decode(ids) would drop its space, the stream does not.
    const prompt = 'Once upon a time, there was a';
    const out = await run(['generate', '--model', model, '--prompt', prompt, '--max-tokens', '24', '--threads', '1', '--json']);
    expect(out.code).toBe(0);
    const r = JSON.parse(out.stdout);
    expect(r.text.startsWith(' ')).toBe(true);
    const backend = await LocalBackend.open(model, { threads: 1 });
    try {
      const res = await createOpenAiApi({ backend }).handle({
        method: 'POST',
        path: '/v1/completions',
        headers: { 'content-type': 'application/json' },
        body: (async function* () {
          yield Buffer.from(JSON.stringify({ prompt, max_tokens: 24, temperature: 0 }));
        })(),
        signal: new AbortController().signal,
      });
      if (!('body' in res)) throw new Error('expected a JSON body');
      expect(r.text).toBe(JSON.parse(res.body).choices[0].text);
    } finally {
      await backend.close();
    }
  });

  test('--chat renders the prompt with the fallback template and one BOS, as the API does for the same message', async () => {
    const out = await run(['generate', '--model', model, '--prompt', 'Hi', '--chat', '--max-tokens', '8', '--threads', '1', '--json']);
    expect(out.code).toBe(0);
    const r = JSON.parse(out.stdout);
    const backend = await LocalBackend.open(model, { threads: 1 });
    try {
      expect(backend.chatTemplateSource).toBe('plain');
      expect(r.prompt_ids).toEqual(backend.prepare({ kind: 'chat', messages: [{ role: 'user', content: 'Hi' }] }).ids);
      expect(r.prompt_ids[0]).toBe(1);
      expect(r.ids.length).toBeGreaterThan(0);
    } finally {
      await backend.close();
    }
  });

  test('--split runs a chain of stages and gives the same ids', async () => {
    const whole = JSON.parse((await run(base())).stdout);
    const split = JSON.parse((await run([...base(), '--split', '0-1,1-3,3-5'])).stdout);
    expect(split.ids).toEqual(whole.ids);
  });

  test('the same seed gives the same sampled text', async () => {
    const sampled = (seed: string) => run([...base(), '--temperature', '0.9', '--seed', seed]).then((o) => JSON.parse(o.stdout).ids);
    expect(await sampled('11')).toEqual(await sampled('11'));
  });

  test('refuses a range outside the model with RANGE_OUT_OF_MODEL', async () => {
    const out = await run([...base(), '--split', '0-2,2-6']);
    expect(out.code).toBe(1);
    expect(JSON.parse(out.stdout).error.code).toBe('RANGE_OUT_OF_MODEL');
    expect(out.stderr).toMatch(/outside the model's 5 layers/);
  });

  test('refuses a prompt longer than the context with CONTEXT_EXCEEDED', async () => {
    const out = await run(['generate', '--model', model, '--prompt', 'Lily and Tom. '.repeat(700), '--max-tokens', '1', '--json']);
    expect(out.code).toBe(1);
    expect(JSON.parse(out.stdout).error.code).toBe('CONTEXT_EXCEEDED');
  });

  test('refuses a model of an unsupported architecture with MODEL_UNSUPPORTED', async () => {
    const out = await run(['generate', '--model', await testModelPath('vocab/ggml-vocab-gpt-2.gguf'), '--prompt', 'Hi', '--json']);
    expect(out.code).toBe(1);
    expect(JSON.parse(out.stdout).error.code).toBe('MODEL_UNSUPPORTED');
    expect(out.stderr).toMatch(/architecture 'gpt2' is not supported/);
  });

  test('refuses a weight of an unsupported tensor type, naming the tensor', async () => {
    // stories260K with blk.0.attn_q.weight stored as MXFP4.
    const src = await openGguf(model);
    const tensors = src.tensors.map((t) => ({ name: t.name, type: t.name === 'blk.0.attn_q.weight' ? GgmlType.MXFP4 : t.type, dims: t.dims }));
    const data = await Promise.all(
      src.tensors.map(async (t, i) => (tensors[i]!.type === t.type ? readTensorBytes(src, t) : new Uint8Array(tensorByteLength(GgmlType.MXFP4, t.dims)))),
    );
    const path = join(dir, 'iq4nl.gguf');
    await writeFile(path, buildGguf({ metadata: writableMetadata(src), tensors }, data));
    const out = await run(['generate', '--model', path, '--prompt', 'Hi', '--json']);
    expect(out.code).toBe(1);
    expect(JSON.parse(out.stdout).error).toMatchObject({ code: 'MODEL_UNSUPPORTED', tensor: 'blk.0.attn_q.weight', type: 'MXFP4' });
  });

  test('rejects a malformed option with a usage error', async () => {
    const out = await run([...base(), '--max-tokens', 'many']);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/--max-tokens must be an integer/);
    const layout = await run([...base(), '--weight-layout', 'quick']);
    expect(layout.code).toBe(2);
    expect(layout.stderr).toMatch(/--weight-layout must be one of exact, fast, got 'quick'/);
  });

  test('--weight-layout fast builds Q4_0 layers in the fast layout (kept in the shard cache apart from exact ones)', async () => {
    const path = join(dir, 'tiny-q4_0.gguf');
    const tiny = { name: 'tiny llama', architecture: 'llama', blockCount: 2, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 64 };
    await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q4_0, out: path, seed: 3 });
    const args = ['generate', '--model', path, '--prompt', 'a b c', '--max-tokens', '8', '--threads', '1', '--json'];
    const fast = await run([...args, '--weight-layout', 'fast']);
    expect(fast.code).toBe(0);
    expect(JSON.parse(fast.stdout).ids).toHaveLength(8);
    const exact = await run(args);
    expect(exact.code).toBe(0);
    // One folder per model: this model's holds its layer 0 in both forms.
    const fastLayers = (await readdir(join(dir, 'cache', 'shards'), { recursive: true })).filter((f) => f.endsWith('layer-0-fp32fast.json'));
    expect(fastLayers).toHaveLength(1);
    const modelDir = join(dir, 'cache', 'shards', fastLayers[0]!, '..');
    expect((await readdir(modelDir)).filter((f) => /^layer-0-\w+\.json$/.test(f)).sort()).toEqual(['layer-0-fp32.json', 'layer-0-fp32fast.json']);
  });
});
