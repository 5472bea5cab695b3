// `kiwi synth --shape <name|json> --quant <type> --out F [--seed S]`: writes a random-weight GGUF of a
// real model shape, with a working SentencePiece vocabulary, for benchmarks and tests.
import { KiwiError } from '../engine/errors.js';
import { NAMED_SHAPES, resolveShape } from '../engine/model/synth/shapes.js';
import { SYNTH_QUANTS, synthesizeModel } from '../engine/model/synth/synth.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';

export const synthCommand = defineCommand({
  name: 'synth',
  summary: 'Write a random-weight GGUF model of a real shape (for benchmarks and tests)',
  description:
    `Named shapes: ${Object.keys(NAMED_SHAPES).join(', ')}. A JSON shape (inline or a file path) gives ` +
    'name, architecture (llama|mistral|qwen2|qwen3), blockCount, embeddingLength, headCount, headCountKv, feedForwardLength, ' +
    'vocabSize, contextLength and optionally headDim, rmsEps, ropeFreqBase, ropeScaling, tiedEmbeddings, qkvBias, qkNorm. ' +
    "Norms stay F32; rows that are not whole k-quant blocks fall back to Q4_0/Q8_0. q4_k_m is llama.cpp's Q4_K_M mix: " +
    'Q6_K for the output projection (or tied embedding) and for attn_v and ffn_down in the first and last eighth of the layers ' +
    'and every third layer between, Q4_K elsewhere (general.file_type 15). Progress goes to stderr.',
  positionals: [],
  options: {
    shape: { type: 'string', valueName: 'NAME|JSON', description: 'A named shape, inline JSON or a JSON file' },
    quant: { type: 'string', valueName: 'TYPE', description: `Weight type: ${Object.keys(SYNTH_QUANTS).join(', ')}`, default: 'q8_0' },
    out: { type: 'string', valueName: 'FILE', description: 'Where to write the .gguf' },
    seed: { type: 'string', valueName: 'S', description: 'Seed of the random weights (an integer)', default: '0' },
    json: { type: 'boolean', description: 'Print the result as one JSON object' },
  },
  async run(ctx) {
    const shapeSpec = stringOption(ctx, 'shape');
    const out = stringOption(ctx, 'out');
    if (shapeSpec === undefined) throw new KiwiError('USAGE', "missing --shape. Run 'kiwi synth --help'.");
    if (out === undefined) throw new KiwiError('USAGE', "missing --out. Run 'kiwi synth --help'.");
    const quantName = (stringOption(ctx, 'quant') ?? 'q8_0').toLowerCase();
    const quant = SYNTH_QUANTS[quantName];
    if (quant === undefined) throw new KiwiError('USAGE', `unknown --quant '${quantName}'; use one of ${Object.keys(SYNTH_QUANTS).join(', ')}`);
    const seedText = stringOption(ctx, 'seed') ?? '0';
    const seed = Number(seedText);
    if (!Number.isSafeInteger(seed)) throw new KiwiError('USAGE', `--seed must be an integer, got '${seedText}'`);
    const shape = resolveShape(shapeSpec);

    // On a terminal the line is redrawn in place; elsewhere (logs, CI) one line per 10%.
    const tty = (ctx.stderr as NodeJS.WriteStream).isTTY === true;
    const step = tty ? 1 : 10;
    let lastPercent = -1;
    const result = await synthesizeModel({
      shape,
      quant,
      out,
      seed,
      signal: ctx.signal,
      onProgress: (written, total) => {
        const percent = Math.floor((100 * written) / total / step) * step;
        if (percent === lastPercent) return;
        lastPercent = percent;
        const line = `synth: ${String(percent).padStart(3)}% of ${(total / 2 ** 20).toFixed(1)} MiB`;
        ctx.stderr.write(tty ? `\r${line}${written === total ? '\n' : ''}` : `${line}\n`);
      },
    });
    if (booleanOption(ctx, 'json')) {
      writeJson(ctx.stdout, { path: result.path, bytes: result.bytes, tensors: result.tensors, parameters: result.parameters, shape: shape.name, quant: quantName, seed });
    } else {
      ctx.stdout.write(`wrote ${result.path}: ${shape.name}, ${quantName}, ${String(result.parameters)} parameters, ${String(result.bytes)} bytes\n`);
    }
    return 0;
  },
});
