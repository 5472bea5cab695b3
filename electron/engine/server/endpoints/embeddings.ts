// POST /v1/embeddings: one vector per input (a string, strings, token ids or arrays of them), from a
// backend that can embed (kiwi serve's; not the ring's), as floats or base64, under a queue slot.
import { KiwiError } from '../../errors.js';
import { jsonEndpoint, type EndpointCall, type EndpointContext } from '../api-endpoint.js';
import { checkModel } from '../api-request.js';
import { json, type ApiResponse } from '../api-response.js';
import { embeddingInputs, embeddingsRequestSchema, type EmbeddingsRequest } from '../openai-schema.js';

export const embeddingsEndpoint = jsonEndpoint('/v1/embeddings', embeddingsRequestSchema, embeddings);

async function embeddings(ctx: EndpointContext, { req, log }: EndpointCall, body: EmbeddingsRequest): Promise<ApiResponse> {
  const { backend } = ctx;
  checkModel(backend, body.model);
  const embed = backend.embed?.bind(backend);
  if (embed === undefined) {
    throw new KiwiError('API_BAD_REQUEST', `embeddings are not available from this backend (${backend.modelId} through the ring); use kiwi serve for /v1/embeddings`, { param: 'input' });
  }
  const prompts = await Promise.all(embeddingInputs(body.input).map((input) => ctx.prepare(input)));
  for (const [i, p] of prompts.entries()) {
    if (p.ids.length > backend.contextTokens) {
      throw new KiwiError('CONTEXT_EXCEEDED', `input ${i} has ${p.ids.length} tokens but the context holds ${backend.contextTokens}; shorten it`, { param: 'input' });
    }
  }
  const release = await ctx.jobs.admit(req);
  try {
    const vectors: Float32Array[] = [];
    for (const p of prompts) vectors.push(await embed(p.ids, req.signal));
    const dims = vectors[0]?.length ?? 0;
    if (body.dimensions != null && body.dimensions !== dims) {
      throw new KiwiError('API_BAD_REQUEST', `'dimensions' must be ${dims} for ${backend.modelId} (its hidden size); Kiwi does not shorten embeddings`, { param: 'dimensions' });
    }
    const tokens = prompts.reduce((a, p) => a + p.ids.length, 0);
    log.tokens = tokens;
    return json(200, {
      object: 'list',
      data: vectors.map((v, index) => ({
        object: 'embedding',
        index,
        embedding: body.encoding_format === 'base64' ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') : Array.from(v),
      })),
      model: backend.modelId,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  } finally {
    release();
  }
}
