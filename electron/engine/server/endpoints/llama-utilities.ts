// llama-server's POST /tokenize, /detokenize and /apply-template: the backend's tokenizer and chat
// template on their own, for clients written against llama-server (editors, token counters).
import { KiwiError } from '../../errors.js';
import { jsonEndpoint } from '../api-endpoint.js';
import { checkTokenIds } from '../api-request.js';
import { json } from '../api-response.js';
import { applyTemplateRequestSchema, detokenizeRequestSchema, messageText, tokenizeRequestSchema } from '../openai-schema.js';

export const tokenizeEndpoint = jsonEndpoint('/tokenize', tokenizeRequestSchema, async ({ backend }, _call, b) => {
  if (backend.tokenize === undefined) throw new KiwiError('API_NOT_FOUND', 'this backend cannot tokenize');
  const ids = await backend.tokenize(b.content, { addSpecial: b.add_special ?? false, parseSpecial: b.parse_special ?? true });
  return json(200, { tokens: b.with_pieces === true ? ids.map((id) => ({ id, piece: backend.tokenPiece!(id) })) : ids });
});

export const detokenizeEndpoint = jsonEndpoint('/detokenize', detokenizeRequestSchema, ({ backend }, _call, b) => {
  checkTokenIds(backend, b.tokens, 'tokens');
  return json(200, { content: backend.detokenize!(b.tokens) });
});

export const applyTemplateEndpoint = jsonEndpoint('/apply-template', applyTemplateRequestSchema, ({ backend }, _call, b) => {
  const prompt = backend.prepare({ kind: 'chat', messages: b.messages.map((m) => ({ role: m.role, content: messageText(m) })) });
  return json(200, { prompt: prompt.text });
});
