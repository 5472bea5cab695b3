// Chat prompts from a model's tokenizer.chat_template, rendered with a real Jinja implementation
// (@huggingface/jinja, the one transformers.js uses), with the variables Hugging Face passes
// (messages, add_generation_prompt, bos_token, eos_token, raise_exception, ...). A model without a
// template gets ChatML when its vocabulary has <|im_start|>, else a plain "User:/Assistant:" format.
// Pure: values in, a string out. Every failure is a KiwiError('TEMPLATE_ERROR').
import { Template } from '@huggingface/jinja';
import { KiwiError } from '../errors.js';
import { metaString } from './gguf/gguf-metadata.js';
import type { GgufMetadata } from './gguf/gguf-metadata.js';
import type { Tokenizer } from './tokenizer/tokenizer.js';

export interface ChatMessage {
  role: string;
  content: string;
  /** Tool calling (completion/tool-prompt.ts): handed to the template as OpenAI names them. */
  tool_calls?: unknown;
  tool_call_id?: string;
  name?: string;
}

export interface ChatRenderOptions {
  /** Append the opening of the assistant's turn. Default true. */
  addGenerationPrompt?: boolean;
  /** Further template variables (e.g. tools, date_string); they cannot replace the ones Kiwi sets. */
  variables?: Record<string, unknown>;
}

export type ChatTemplateSource = 'model' | 'chatml' | 'plain';

export interface ChatTemplate {
  /** Where the template came from: the model's metadata or one of Kiwi's fallbacks. */
  readonly source: ChatTemplateSource;
  readonly template: string;
  render(messages: readonly ChatMessage[], options?: ChatRenderOptions): string;
}

/** What the fallback choice and the bos/eos variables need from a tokenizer. */
export interface ChatTokens {
  bosText?: string | undefined;
  eosText?: string | undefined;
  /** Whether the vocabulary has this exact token text. */
  hasToken(text: string): boolean;
}

export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export const PLAIN_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}" +
  "{% elif message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n' }}" +
  "{% else %}{{ 'Assistant: ' + message['content'] + '\\n' }}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

class RaisedByTemplate extends Error {}

const RAISE_VAR = 'kiwi_raise_exception';

function templateError(message: string, cause: unknown): KiwiError {
  return new KiwiError('TEMPLATE_ERROR', message, { cause: cause instanceof Error ? cause.message : String(cause) });
}

/** Compiles a Jinja chat template; a syntax error is a TEMPLATE_ERROR naming it. */
export function compileChatTemplate(template: string, source: ChatTemplateSource, tokens: Pick<ChatTokens, 'bosText' | 'eosText'> = {}): ChatTemplate {
  let compiled: Template;
  try {
    // @huggingface/jinja's own raise_exception throws a plain Error and cannot be redeclared; a
    // top-level `set` (which outputs nothing) points the name at Kiwi's, so a refusal is told apart.
    compiled = new Template(`{% set raise_exception = ${RAISE_VAR} %}${template}`);
  } catch (err) {
    throw templateError(
      `the ${source === 'model' ? "model's" : source} chat template is not valid Jinja (${err instanceof Error ? err.message : String(err)}); ` +
        'fix tokenizer.chat_template or run without --chat',
      err,
    );
  }
  return {
    source,
    template,
    render(messages, options = {}) {
      const { raise_exception: _ignored, ...extra } = options.variables ?? {}; // a global of the engine
      const variables: Record<string, unknown> = {
        ...extra,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: tokens.bosText ?? '',
        eos_token: tokens.eosText ?? '',
        [RAISE_VAR]: (message: unknown) => {
          throw new RaisedByTemplate(String(message));
        },
      };
      try {
        return compiled.render(variables);
      } catch (err) {
        if (err instanceof RaisedByTemplate) {
          throw templateError(`the chat template refused these messages: ${err.message}`, err);
        }
        throw templateError(`the chat template failed while rendering: ${err instanceof Error ? err.message : String(err)}`, err);
      }
    },
  };
}

/** The model's tokenizer.chat_template, else ChatML if the vocabulary has <|im_start|>, else plain text. */
export function chatTemplateForModel(metadata: GgufMetadata, tokens: ChatTokens): ChatTemplate {
  const own = metaString(metadata, 'tokenizer.chat_template');
  if (own !== undefined && own.trim() !== '') return compileChatTemplate(own, 'model', tokens);
  if (tokens.hasToken('<|im_start|>') && tokens.hasToken('<|im_end|>')) return compileChatTemplate(CHATML_TEMPLATE, 'chatml', tokens);
  return compileChatTemplate(PLAIN_TEMPLATE, 'plain', tokens);
}

/** The bos/eos texts and token lookup of a Kiwi tokenizer. */
export function chatTokensOf(tokenizer: Tokenizer): ChatTokens {
  return {
    bosText: tokenizer.bosId !== undefined ? tokenizer.tokenText(tokenizer.bosId) : undefined,
    eosText: tokenizer.eosId !== undefined ? tokenizer.tokenText(tokenizer.eosId) : undefined,
    hasToken: (text) => tokenizer.tokenId(text) !== undefined,
  };
}

/**
 * Renders messages with `template` and tokenizes the result as llama.cpp's server does: the
 * template writes special tokens as text, and BOS is added (when the model adds one) unless the
 * template already wrote it. `kiwi generate --chat` and the API's chat prompts both come from here.
 */
export function encodeChatPrompt(
  tokenizer: Tokenizer,
  template: ChatTemplate,
  messages: readonly ChatMessage[],
  options: ChatRenderOptions = {},
): { text: string; ids: number[] } {
  const text = template.render(messages, options);
  const ids = tokenizer.encode(text, { parseSpecial: true, addBos: false });
  if (tokenizer.addBos && tokenizer.bosId !== undefined && ids[0] !== tokenizer.bosId) ids.unshift(tokenizer.bosId);
  return { text, ids };
}
