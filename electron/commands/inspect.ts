// `kiwi inspect <model.gguf> [--json]`: the model's shape and where its bytes are (see model-summary.ts).
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { formatModelSummary, summarizeModel } from '../engine/model/model-summary.js';
import { booleanOption, defineCommand, writeJson } from './command.js';

export const inspectCommand = defineCommand({
  name: 'inspect',
  summary: 'Show the architecture, dimensions and byte layout of a GGUF model',
  description:
    'Reads only the header of the file. bytes_per_block lists the tensor bytes of every block (per_block) with their max, min and mean; ' +
    'head_bytes splits the head into embedding, output norm and output projection (output is 0 when the embeddings are tied).',
  positionals: [{ name: 'model.gguf', description: 'Path of the GGUF model file' }],
  options: {
    json: { type: 'boolean', description: 'Print one JSON object instead of a table' },
  },
  async run(ctx) {
    const file = await openGguf(ctx.positionals[0]!);
    const summary = summarizeModel(file);
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, summary);
    else ctx.stdout.write(formatModelSummary(summary));
    return 0;
  },
});
