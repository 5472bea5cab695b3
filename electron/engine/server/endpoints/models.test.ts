// GET /v1/models and /v1/models/{id} in-process against stories260K.
import { describe, expect, test } from 'vitest';
import type { LocalBackend } from '../local-backend.js';
import type { OpenAiApi } from '../openai-api.js';
import { apiCall, withStoriesApi } from '../test-helpers.js';

let backend: LocalBackend;
let api: OpenAiApi;
withStoriesApi((s) => ({ backend, api } = s));

describe('models', () => {
  test('lists the served model', async () => {
    const r = await apiCall(api, 'GET', '/v1/models');
    const ctx = backend.contextTokens;
    expect(r.json).toEqual({
      object: 'list',
      data: [
        {
          id: 'stories260K',
          object: 'model',
          created: backend.createdAt,
          owned_by: 'kiwi',
          context_length: ctx,
          max_model_len: ctx,
          meta: { n_ctx: ctx, n_ctx_train: backend.trainContextTokens, n_vocab: 512 },
        },
      ],
    });
    expect((await apiCall(api, 'GET', '/v1/models/stories260K')).json.id).toBe('stories260K');
    expect((await apiCall(api, 'GET', '/v1/models/gpt-4')).status).toBe(404);
  });
});
