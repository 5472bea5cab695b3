// Model shapes for `kiwi synth`: the real dimensions of well-known Llama-family models (from their
// published config.json), and JSON-given shapes validated with zod. Invariant: a ModelShape that
// leaves here is consistent (heads divide, dims positive), so synth can lay out tensors blindly.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { KiwiError } from '../../errors.js';
import { parseJson } from '../../parse-json.js';

const ropeScalingSchema = z.discriminatedUnion('type', [
  // Llama 3.1+: stored as the rope_freqs.weight tensor of per-frequency divisors, as llama.cpp's converter does.
  z.object({
    type: z.literal('llama3'),
    factor: z.number().positive(),
    lowFreqFactor: z.number().positive(),
    highFreqFactor: z.number().positive(),
    originalContextLength: z.number().int().positive(),
  }),
  z.object({
    type: z.enum(['linear', 'yarn']),
    factor: z.number().positive(),
    originalContextLength: z.number().int().positive().optional(),
  }),
]);

export const modelShapeSchema = z
  .object({
    name: z.string().min(1).max(200),
    architecture: z.enum(['llama', 'mistral', 'qwen2', 'qwen3']),
    blockCount: z.number().int().min(1).max(1024),
    embeddingLength: z.number().int().min(1).max(65536),
    headCount: z.number().int().min(1).max(1024),
    headCountKv: z.number().int().min(1).max(1024),
    /** Per-head dim; default embeddingLength / headCount. */
    headDim: z.number().int().min(2).max(1024).optional(),
    feedForwardLength: z.number().int().min(1).max(1 << 20),
    /** At least the 3 specials and 256 byte tokens of the synthetic SentencePiece vocabulary. */
    vocabSize: z.number().int().min(259 + 32).max(1 << 20),
    contextLength: z.number().int().min(1).max(1 << 24),
    rmsEps: z.number().positive().max(0.1).default(1e-5),
    ropeFreqBase: z.number().positive().default(10000),
    ropeScaling: ropeScalingSchema.optional(),
    tiedEmbeddings: z.boolean().default(false),
    qkvBias: z.boolean().default(false),
    qkNorm: z.boolean().default(false),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.headCount % s.headCountKv !== 0) {
      ctx.addIssue({ code: 'custom', message: `headCount ${String(s.headCount)} must be a multiple of headCountKv ${String(s.headCountKv)}` });
    }
    if (s.headDim === undefined && s.embeddingLength % s.headCount !== 0) {
      ctx.addIssue({ code: 'custom', message: 'embeddingLength must be divisible by headCount (or give headDim)' });
    }
    if ((s.headDim ?? s.embeddingLength / s.headCount) % 2 !== 0) {
      ctx.addIssue({ code: 'custom', message: 'the head dim must be even (rotary embedding pairs)' });
    }
  });

export type ModelShape = z.infer<typeof modelShapeSchema>;

const LLAMA3_ROPE = { type: 'llama3', lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 } as const;

/** Real shapes (config.json of each model on Hugging Face). */
export const NAMED_SHAPES: Readonly<Record<string, ModelShape>> = {
  'llama-3.2-1b': {
    name: 'Llama-3.2-1B (synthetic)',
    architecture: 'llama',
    blockCount: 16,
    embeddingLength: 2048,
    headCount: 32,
    headCountKv: 8,
    feedForwardLength: 8192,
    vocabSize: 128256,
    contextLength: 131072,
    rmsEps: 1e-5,
    ropeFreqBase: 500000,
    ropeScaling: { ...LLAMA3_ROPE, factor: 32 },
    tiedEmbeddings: true,
    qkvBias: false,
    qkNorm: false,
  },
  'llama-3.2-3b': {
    name: 'Llama-3.2-3B (synthetic)',
    architecture: 'llama',
    blockCount: 28,
    embeddingLength: 3072,
    headCount: 24,
    headCountKv: 8,
    feedForwardLength: 8192,
    vocabSize: 128256,
    contextLength: 131072,
    rmsEps: 1e-5,
    ropeFreqBase: 500000,
    ropeScaling: { ...LLAMA3_ROPE, factor: 32 },
    tiedEmbeddings: true,
    qkvBias: false,
    qkNorm: false,
  },
  'llama-3.1-8b': {
    name: 'Llama-3.1-8B (synthetic)',
    architecture: 'llama',
    blockCount: 32,
    embeddingLength: 4096,
    headCount: 32,
    headCountKv: 8,
    feedForwardLength: 14336,
    vocabSize: 128256,
    contextLength: 131072,
    rmsEps: 1e-5,
    ropeFreqBase: 500000,
    ropeScaling: { ...LLAMA3_ROPE, factor: 8 },
    tiedEmbeddings: false,
    qkvBias: false,
    qkNorm: false,
  },
  'qwen2.5-0.5b': {
    name: 'Qwen2.5-0.5B (synthetic)',
    architecture: 'qwen2',
    blockCount: 24,
    embeddingLength: 896,
    headCount: 14,
    headCountKv: 2,
    feedForwardLength: 4864,
    vocabSize: 151936,
    contextLength: 32768,
    rmsEps: 1e-6,
    ropeFreqBase: 1000000,
    tiedEmbeddings: true,
    qkvBias: true,
    qkNorm: false,
  },
  'qwen3-0.6b': {
    name: 'Qwen3-0.6B (synthetic)',
    architecture: 'qwen3',
    blockCount: 28,
    embeddingLength: 1024,
    headCount: 16,
    headCountKv: 8,
    headDim: 128,
    feedForwardLength: 3072,
    vocabSize: 151936,
    contextLength: 40960,
    rmsEps: 1e-6,
    ropeFreqBase: 1000000,
    tiedEmbeddings: true,
    qkvBias: false,
    qkNorm: true,
  },
  'mistral-7b-v0.3': {
    name: 'Mistral-7B-v0.3 (synthetic)',
    // llama.cpp converts Mistral 7B to the llama architecture.
    architecture: 'llama',
    blockCount: 32,
    embeddingLength: 4096,
    headCount: 32,
    headCountKv: 8,
    feedForwardLength: 14336,
    vocabSize: 32768,
    contextLength: 32768,
    rmsEps: 1e-5,
    ropeFreqBase: 1000000,
    tiedEmbeddings: false,
    qkvBias: false,
    qkNorm: false,
  },
};

/**
 * Resolves `--shape`: a named shape, inline JSON (starting with `{`), or a path to a JSON file.
 */
export function resolveShape(spec: string): ModelShape {
  const named = NAMED_SHAPES[spec.toLowerCase()];
  if (named !== undefined) return named;
  let text = spec;
  if (!spec.trimStart().startsWith('{')) {
    try {
      text = readFileSync(spec, 'utf8');
    } catch {
      throw new KiwiError(
        'USAGE',
        `unknown shape '${spec}': not one of ${Object.keys(NAMED_SHAPES).join(', ')}, not inline JSON and not a readable JSON file`,
      );
    }
  }
  return parseJson(modelShapeSchema, text, {
    code: 'USAGE',
    notJson: (reason) => `the shape is not valid JSON: ${reason}`,
    invalid: (issues) => `invalid shape: ${issues.join('; ')}`,
    root: '(shape)',
  });
}

export function shapeHeadDim(s: ModelShape): number {
  return s.headDim ?? s.embeddingLength / s.headCount;
}
