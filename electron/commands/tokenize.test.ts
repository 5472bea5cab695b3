import { describe, expect, it } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import { runKiwi as run } from './test-support/run-kiwi.js';

describe('kiwi tokenize', () => {
  it('prints the ids llama.cpp gives, with BOS as the model asks, as one JSON line', async () => {
    const model = await testModelPath('stories260K.gguf');
    // Reference: node-llama-cpp 3.21.1 model.tokenize('Hello world') on stories260K = [346, 306, 414, 263, 304, 341].
    const withBos = await run(['tokenize', '--model', model, '--json', 'Hello', 'world']);
    expect(withBos).toEqual({ code: 0, stdout: '{"ids":[1,346,306,414,263,304,341]}\n', stderr: '' });
    const noBos = await run(['tokenize', '--model', model, '--no-bos', '--json', 'Hello world']);
    expect(JSON.parse(noBos.stdout)).toEqual({ ids: [346, 306, 414, 263, 304, 341] });
  });

  it('parses control-token text only with --parse-special', async () => {
    const model = await testModelPath('vocab/ggml-vocab-phi-3.gguf');
    const special = await run(['tokenize', '--model', model, '--no-bos', '--parse-special', '--json', '<|user|>\nHi<|end|>']);
    expect(JSON.parse(special.stdout)).toEqual({ ids: [32010, 6324, 32007] });
    const plain = await run(['tokenize', '--model', model, '--no-bos', '--json', '<|user|>']);
    expect(JSON.parse(plain.stdout).ids).not.toContain(32010);
  });

  it('lists each token with its vocabulary text without --json', async () => {
    const model = await testModelPath('stories260K.gguf');
    const out = await run(['tokenize', '--model', model, 'Hi']);
    expect(out.code).toBe(0);
    expect(out.stdout.split('\n')[0]).toBe('1\t"<s>"');
  });

  it('fails with a usage error without --model', async () => {
    const out = await run(['tokenize', '--json', 'Hi']);
    expect(out.code).toBe(2);
    expect(out.stdout + out.stderr).toMatch(/missing --model/);
  });
});
