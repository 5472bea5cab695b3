// GET /v1/models[/{id}] (the served model, with its context size under LM Studio's, vLLM's and
// llama-server's names) and GET /health (the backend's state and the queue's load, no key needed).
import type { CompletionBackend } from '../../completion/completion-backend.js';
import type { Endpoint } from '../api-endpoint.js';
import { modelNotFound, safeDecode } from '../api-request.js';
import { json } from '../api-response.js';

const MODELS_PATH = '/v1/models';

export const modelsEndpoint: Endpoint = {
  methods: ['GET'],
  path: MODELS_PATH,
  matchesBelow: true,
  needs: 'key',
  handle: ({ backend }, { req }) => {
    if (req.path === MODELS_PATH) return json(200, { object: 'list', data: backend.status() === 'serving' ? [modelObject(backend)] : [] });
    const id = safeDecode(req.path.slice(`${MODELS_PATH}/`.length));
    if (backend.status() !== 'serving' || id !== backend.modelId) throw modelNotFound(backend, id);
    return json(200, modelObject(backend));
  },
};

export const healthEndpoint: Endpoint = {
  methods: ['GET'],
  path: '/health',
  needs: 'nothing',
  handle: ({ backend, queue }) => {
    const status = backend.status();
    return json(status === 'serving' ? 200 : 503, { status, ...queue.load(), ...backend.health?.() });
  },
};

function modelObject(backend: CompletionBackend) {
  return {
    id: backend.modelId,
    object: 'model',
    created: backend.createdAt,
    owned_by: 'kiwi',
    // The positions one request may use here (LM Studio's and vLLM's field names), and llama-server's meta.
    context_length: backend.contextTokens,
    max_model_len: backend.contextTokens,
    meta: { n_ctx: backend.contextTokens, n_ctx_train: backend.trainContextTokens ?? backend.contextTokens, n_vocab: backend.vocabSize ?? null },
  };
}
