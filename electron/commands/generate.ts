// `kiwi generate`: runs a whole model in this process (optionally as a chain of --split stages)
// and prints the continuation of a prompt. JSON: {"text","prompt_ids","ids","ttft_ms","tokens_per_s"}.
import { KiwiError } from '../engine/errors.js';
import { shardCache } from '../engine/hosting/cache-layout.js';
import { parseSplit } from '../engine/runtime/layer-range.js';
import { chatTemplateForModel, chatTokensOf, encodeChatPrompt } from '../engine/model/chat-template.js';
import { openLocalModel } from '../engine/runtime/local-model.js';
import type { ExecutionProvider } from '../engine/ort/session.js';
import { DEFAULT_SAMPLING, Sampler } from '../engine/runtime/sampling.js';
import { generate } from '../engine/runtime/generation.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';
import type { CommandContext } from './command.js';
import { WEIGHT_LAYOUT_OPTION, weightLayoutFlag } from './weight-layout-flag.js';

function numberOption(ctx: CommandContext, name: string, fallback: number, integer: boolean): number {
  const raw = stringOption(ctx, name);
  if (raw === undefined) return fallback;
  const v = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw new KiwiError('USAGE', `--${name} must be ${integer ? 'an integer' : 'a number'}, got '${raw}'`);
  }
  return v;
}

const PROVIDERS: readonly ExecutionProvider[] = ['cpu', 'cuda', 'dml'];

export const generateCommand = defineCommand({
  name: 'generate',
  summary: 'Generate text from a prompt with a GGUF model on this machine',
  description:
    'Runs the model with onnxruntime. --split runs it as a chain of stages (the layer ranges a session would give its members); ' +
    'any split gives the same tokens. Temperature 0 (the default) is greedy decoding.',
  positionals: [],
  options: {
    model: { type: 'string', description: 'Path of the GGUF model file', valueName: 'FILE' },
    prompt: { type: 'string', description: 'The prompt text', valueName: 'TEXT' },
    chat: { type: 'boolean', description: "Wrap the prompt as one user message with the model's chat template" },
    'max-tokens': { type: 'string', description: 'Most tokens to generate', valueName: 'N', default: '128' },
    temperature: { type: 'string', description: 'Sampling temperature; 0 = greedy', valueName: 'T', default: '0' },
    'top-k': { type: 'string', description: 'Keep the K most likely tokens (0 = off)', valueName: 'K', default: '0' },
    'top-p': { type: 'string', description: 'Nucleus sampling threshold (1 = off)', valueName: 'P', default: '1' },
    'min-p': { type: 'string', description: 'Drop tokens below P x the top probability (0 = off)', valueName: 'P', default: '0' },
    'repeat-penalty': { type: 'string', description: 'Repetition penalty (1 = off)', valueName: 'R', default: '1' },
    seed: { type: 'string', description: 'Random seed for sampling', valueName: 'S', default: '0' },
    stop: { type: 'string', description: 'Stop when the text contains this (repeatable)', valueName: 'TEXT', multiple: true },
    split: { type: 'string', description: 'Run as stages with these layer ranges, e.g. 0-4,4-8', valueName: 'RANGES' },
    provider: { type: 'string', description: 'Execution provider: cpu, cuda or dml (default: best available)', valueName: 'EP' },
    threads: { type: 'string', description: 'CPU threads (default: all cores)', valueName: 'N' },
    'weight-layout': WEIGHT_LAYOUT_OPTION,
    exact: { type: 'boolean', description: 'Keep f32 activations in quantized matmuls (slower; default: int8 activations, as llama.cpp does)' },
    'no-shard-cache': { type: 'boolean', description: 'Build the stage graphs in memory instead of using the shard cache on disk' },
    json: { type: 'boolean', description: 'Print one JSON object' },
  },
  async run(ctx) {
    const modelPath = stringOption(ctx, 'model');
    const prompt = stringOption(ctx, 'prompt');
    if (modelPath === undefined) throw new KiwiError('USAGE', "missing --model. Run 'kiwi generate --help'.");
    if (prompt === undefined) throw new KiwiError('USAGE', "missing --prompt. Run 'kiwi generate --help'.");
    const provider = stringOption(ctx, 'provider');
    if (provider !== undefined && !PROVIDERS.includes(provider as ExecutionProvider)) {
      throw new KiwiError('USAGE', `--provider must be one of ${PROVIDERS.join(', ')}, got '${provider}'`);
    }
    const threads = stringOption(ctx, 'threads') !== undefined ? numberOption(ctx, 'threads', 1, true) : undefined;
    const weightLayout = weightLayoutFlag(ctx);
    const maxTokens = numberOption(ctx, 'max-tokens', 128, true);
    if (maxTokens < 1) throw new KiwiError('USAGE', '--max-tokens must be at least 1');
    const sampler = new Sampler({
      ...DEFAULT_SAMPLING,
      temperature: numberOption(ctx, 'temperature', 0, false),
      topK: numberOption(ctx, 'top-k', 0, true),
      topP: numberOption(ctx, 'top-p', 1, false),
      minP: numberOption(ctx, 'min-p', 0, false),
      repetitionPenalty: numberOption(ctx, 'repeat-penalty', 1, false),
      seed: numberOption(ctx, 'seed', 0, true),
    });
    const splitText = stringOption(ctx, 'split');

    const model = await openLocalModel(modelPath, {
      ...(splitText !== undefined ? { split: parseSplit(splitText) } : {}),
      ...(provider !== undefined ? { provider: provider as ExecutionProvider } : {}),
      ...(threads !== undefined ? { threads } : {}),
      weightLayout,
      ...(booleanOption(ctx, 'no-shard-cache') ? {} : { cache: shardCache() }),
      ...(booleanOption(ctx, 'exact') ? { accuracyLevel: 0 as const } : {}),
    });
    try {
      const chat = booleanOption(ctx, 'chat');
      // --chat: the model's template (or Kiwi's fallback) and BOS rule, exactly as the API's chat prompts.
      const promptIds = chat
        ? encodeChatPrompt(model.tokenizer, chatTemplateForModel(model.file.metadata, chatTokensOf(model.tokenizer)), [{ role: 'user', content: prompt }]).ids
        : model.tokenizer.encode(prompt);
      const stop = (Array.isArray(ctx.values.stop) ? ctx.values.stop : []).filter((s): s is string => typeof s === 'string' && s.length > 0);
      // The text is the concatenation of the stream decoder's pieces (what the server streams, as
      // llama.cpp's server does), not decode(ids), which drops a SentencePiece first piece's space.
      const decoder = model.tokenizer.createStreamDecoder();
      let out = '';
      const result = await generate(model.chain, {
        promptIds,
        maxTokens,
        sampler,
        isEndOfGeneration: (id) => model.tokenizer.isEndOfGeneration(id),
        decoder,
        onToken: (_id, piece) => (out += piece),
        stop,
        signal: ctx.signal,
      });
      out += decoder.flush();
      // Like the API: the text ends right before the earliest stop sequence.
      const cut = Math.min(...stop.map((s) => out.indexOf(s)).filter((at) => at >= 0));
      if (Number.isFinite(cut)) out = out.slice(0, cut);
      const tokensPerS = result.ids.length > 1 && result.decodeMs > 0 ? ((result.ids.length - 1) * 1000) / result.decodeMs : 0;
      if (booleanOption(ctx, 'json')) {
        writeJson(ctx.stdout, {
          text: out,
          prompt_ids: promptIds,
          ids: result.ids,
          finish_reason: result.finishReason,
          ttft_ms: round(result.ttftMs),
          tokens_per_s: round(tokensPerS),
        });
      } else {
        ctx.stdout.write(`${chat ? '' : prompt}${out}\n`);
        ctx.stderr.write(`${result.ids.length} tokens, first after ${round(result.ttftMs)} ms, ${round(tokensPerS)} tokens/s\n`);
      }
      return 0;
    } finally {
      await model.dispose();
    }
  },
});

function round(x: number): number {
  return Math.round(x * 100) / 100;
}
