import { describe, expect, test } from 'vitest';
import type { ModelConfig } from '../model/model-config.js';
import { modelShape } from './decoder-shape.js';

const config = (o: Partial<ModelConfig> = {}, rope: Partial<ModelConfig['rope']> = {}): ModelConfig => ({
  architecture: 'llama',
  blockCount: 4,
  embeddingLength: 256,
  headCount: 4,
  headCountKv: 2,
  headDim: 64,
  valueHeadDim: 64,
  feedForwardLength: 512,
  vocabSize: 1000,
  contextLength: 4096,
  rmsEps: 1e-5,
  tiedEmbeddings: false,
  qkvBias: false,
  qkNorm: false,
  ...o,
  rope: { freqBase: 10000, dimensionCount: 64, scalingType: 'none', scalingFactor: 1, ...rope },
});

describe('decoder shape from the model config', () => {
  test('llama and mistral use the adjacent-pair rope layout, qwen2 and qwen3 the NEOX halves', () => {
    expect(modelShape(config(), undefined).ropeInterleaved).toBe(true);
    expect(modelShape(config({ architecture: 'mistral' }), undefined).ropeInterleaved).toBe(true);
    expect(modelShape(config({ architecture: 'qwen2' }), undefined).ropeInterleaved).toBe(false);
    expect(modelShape(config({ architecture: 'qwen3' }), undefined).ropeInterleaved).toBe(false);
  });

  test('caps the positions at the context length and at the requested maximum', () => {
    expect(modelShape(config(), undefined).maxPositions).toBe(4096);
    expect(modelShape(config(), undefined, { maxPositions: 512 }).maxPositions).toBe(512);
    expect(modelShape(config({ contextLength: 100 }), undefined, { maxPositions: 512 }).maxPositions).toBe(100);
  });

  test('linear rope scaling becomes a frequency scale, llama3 scaling frequency factors', () => {
    expect(modelShape(config({}, { scalingType: 'linear', scalingFactor: 4 }), undefined).rope.freqScale).toBe(0.25);
    const l3 = modelShape(config({}, { scalingType: 'llama3', scalingFactor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 }), undefined);
    expect(l3.rope.freqFactors?.length).toBe(32);
    const fromTensor = Float32Array.from({ length: 32 }, () => 2);
    expect(modelShape(config(), fromTensor).rope.freqFactors).toBe(fromTensor);
  });

  test.each<[string, ModelConfig, RegExp]>([
    ['YaRN rope scaling', config({}, { scalingType: 'yarn', scalingFactor: 4 }), /rope scaling 'yarn' is not supported/],
    ['partial rotary embeddings', config({}, { dimensionCount: 32 }), /partial rotary/],
    ['different key and value head sizes', config({ valueHeadDim: 128 }), /value head dim/],
    ['an unknown architecture', config({ architecture: 'gpt2' }), /architecture 'gpt2' is not supported/],
  ])('refuses %s with MODEL_UNSUPPORTED', (_name, c, message) => {
    expect(() => modelShape(c, undefined)).toThrow(message);
  });
});
