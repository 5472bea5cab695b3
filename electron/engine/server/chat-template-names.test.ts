// The built-in --chat-template formats rendered for a fixed conversation, against golden strings
// written from each family's documented prompt format (ChatML; Meta's Llama 3 model card; Google's
// Gemma formatting guide; Mistral's [INST] format), not produced by the code under test.
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { compileChatTemplate } from '../model/chat-template.js';
import { BUILT_IN_CHAT_TEMPLATES, resolveChatTemplate } from './chat-template-names.js';

const history = [
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: 'Hello!' },
  { role: 'user', content: 'Tell a story.' },
];

function render(name: string, bos: string, eos: string, messages = history): string {
  return compileChatTemplate(BUILT_IN_CHAT_TEMPLATES[name]!, 'model', { bosText: bos, eosText: eos }).render(messages);
}

describe('built-in chat templates', () => {
  test('chatml', () => {
    expect(render('chatml', '<s>', '</s>', [{ role: 'system', content: 'Be brief.' }, ...history])).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nTell a story.<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  test('llama3', () => {
    expect(render('llama3', '<|begin_of_text|>', '<|eot_id|>', [{ role: 'system', content: 'Be brief.' }, ...history])).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nTell a story.<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  test('gemma', () => {
    expect(render('gemma', '<bos>', '<eos>')).toBe(
      '<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nTell a story.<end_of_turn>\n<start_of_turn>model\n',
    );
  });

  test('mistral', () => {
    expect(render('mistral', '<s>', '</s>')).toBe('<s>[INST] Hi [/INST] Hello!</s>[INST] Tell a story. [/INST]');
  });
});

describe('resolveChatTemplate', () => {
  test('a name gives the built-in, a path gives the file', async () => {
    expect(resolveChatTemplate('chatml')).toBe(BUILT_IN_CHAT_TEMPLATES.chatml);
    const file = join(await mkdtemp(join(tmpdir(), 'kiwi-tpl-')), 't.jinja');
    await writeFile(file, '{{ messages[0].content }}');
    expect(resolveChatTemplate(file)).toBe('{{ messages[0].content }}');
  });

  test('neither a name nor a file is a USAGE error that lists the names', () => {
    expect(() => resolveChatTemplate('/no/such/template.jinja')).toThrow(/chatml, llama3, gemma, mistral, plain/);
  });
});
