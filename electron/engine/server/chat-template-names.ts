// `kiwi serve --chat-template FILE|NAME`: a Jinja template that replaces the model's own, either
// a file or one of a few well-known formats by name. The built-ins follow each family's documented
// prompt format (ChatML, Llama 3, Gemma, Mistral [INST]) and use the same variables as the
// models' own templates (messages, add_generation_prompt, bos_token, eos_token).
import { readFileSync } from 'node:fs';
import { KiwiError } from '../errors.js';
import { CHATML_TEMPLATE, PLAIN_TEMPLATE } from '../model/chat-template.js';

export const BUILT_IN_CHAT_TEMPLATES: Readonly<Record<string, string>> = {
  chatml: CHATML_TEMPLATE,
  llama3:
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
  gemma:
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}" +
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
  mistral:
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}" +
    "{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}",
  plain: PLAIN_TEMPLATE,
};

/** The template text for a --chat-template value: a built-in name, else a file's contents. */
export function resolveChatTemplate(value: string): string {
  const builtIn = BUILT_IN_CHAT_TEMPLATES[value];
  if (builtIn !== undefined) return builtIn;
  try {
    const text = readFileSync(value, 'utf8');
    if (text.trim() === '') throw new KiwiError('USAGE', `--chat-template ${value}: the file is empty`);
    return text;
  } catch (err) {
    if (err instanceof KiwiError) throw err;
    throw new KiwiError(
      'USAGE',
      `--chat-template ${value}: not a built-in template (${Object.keys(BUILT_IN_CHAT_TEMPLATES).join(', ')}) and not a readable file (${(err as Error).message})`,
    );
  }
}
