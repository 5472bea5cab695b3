// `kiwi tokenize --model <model.gguf> [--no-bos] [--parse-special] [--json] <text>`: the token ids
// llama.cpp's llama_tokenize gives for the text (see engine/model/tokenizer/tokenizer.ts).
import { KiwiError } from '../engine/errors.js';
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { createTokenizer } from '../engine/model/tokenizer/tokenizer.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';

export const tokenizeCommand = defineCommand({
  name: 'tokenize',
  summary: "Turn text into the model's token ids, exactly as llama.cpp does",
  description:
    "Reads only the model's header. Adds BOS when the model asks for it (tokenizer.ggml.add_bos_token, else llama.cpp's default " +
    'for the vocabulary type). Text that looks like a control token (e.g. <|im_start|>) stays plain text unless --parse-special is given. ' +
    "With --json prints {\"ids\":[...]}; otherwise one line per token: id and the token's vocabulary text. Put -- before text that starts with '-'.",
  positionals: [{ name: 'text', description: 'The text to tokenize (several words are joined with single spaces)', rest: true }],
  options: {
    model: { type: 'string', description: 'Path of the GGUF model file', valueName: 'FILE' },
    'no-bos': { type: 'boolean', description: 'Do not add the BOS token, whatever the model says' },
    'parse-special': { type: 'boolean', description: 'Turn the text of control tokens into those tokens' },
    json: { type: 'boolean', description: 'Print one JSON object {"ids":[...]}' },
  },
  async run(ctx) {
    const modelPath = stringOption(ctx, 'model');
    if (modelPath === undefined) throw new KiwiError('USAGE', "missing --model. Run 'kiwi tokenize --help'.");
    const text = ctx.positionals.join(' ');
    const file = await openGguf(modelPath);
    const tokenizer = createTokenizer(file.metadata);
    const ids = tokenizer.encode(text, {
      ...(booleanOption(ctx, 'no-bos') ? { addBos: false } : {}),
      parseSpecial: booleanOption(ctx, 'parse-special'),
    });
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, { ids });
    else for (const id of ids) ctx.stdout.write(`${String(id)}\t${JSON.stringify(tokenizer.tokenText(id))}\n`);
    return 0;
  },
});
