// The router in-process (no sockets), against stories260K in a LocalBackend: unknown routes and
// methods, the JSON body (malformed, over the limit), the API key, a backend not serving, and the
// per-request log.
import { describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { LocalBackend } from './local-backend.js';
import { createOpenAiApi } from './openai-api.js';
import type { ApiRequest, OpenAiApi, RequestLogEntry } from './openai-api.js';
import { apiCall, apiRequest, withStoriesApi } from './test-helpers.js';

const logged: RequestLogEntry[] = [];
let backend: LocalBackend;
let api: OpenAiApi;
const { call, chat } = withStoriesApi((s) => ({ backend, api } = s), { api: { onRequestDone: (e) => logged.push(e) } });


describe('routes', () => {
  test('answers 404 for an unknown route and 405 with Allow for a wrong method', async () => {
    const missing = await apiCall(api, 'GET', '/v2/things');
    expect(missing.status).toBe(404);
    expect(missing.json.error.type).toBe('not_found_error');
    const wrong = await apiCall(api, 'GET', '/v1/chat/completions');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST');
  });

  test('an unknown path is a 404 naming it and listing the endpoints', async () => {
    const r = await call('POST', '/v1/audio/speech', {});
    expect(r.status).toBe(404);
    expect(r.json.error.message).toContain('/v1/audio/speech');
    for (const e of ['/v1/chat/completions', '/v1/embeddings', '/v1/responses', '/tokenize']) expect(r.json.error.message).toContain(e);
  });
});

describe('bad requests', () => {
  test('malformed JSON is a 400 invalid_request_error', async () => {
    const r = await apiCall(api, 'POST', '/v1/chat/completions', undefined, { raw: '{"messages": [' });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
  });

  test('a body over the limit is refused with 413 before it is read to the end', async () => {
    const small = createOpenAiApi({ backend, maxBodyBytes: 1024 });
    let chunksRead = 0;
    const req: ApiRequest = {
      ...apiRequest('POST', '/v1/completions'),
      body: (async function* () {
        for (let i = 0; i < 1000; i++) {
          chunksRead++;
          yield new Uint8Array(100);
        }
      })(),
    };
    const r = await small.handle(req);
    expect(r.status).toBe(413);
    expect(chunksRead).toBeLessThan(20);
    const declared = await small.handle(apiRequest('POST', '/v1/completions', { prompt: 'x' }, { headers: { 'content-length': '5000' } }));
    expect(declared.status).toBe(413);
  });

  test('a configured API key is required: missing or wrong is a 401, the right one passes', async () => {
    const locked = createOpenAiApi({ backend, apiKey: 'sesame' });
    const missing = await apiCall(locked, 'GET', '/v1/models');
    expect(missing.status).toBe(401);
    expect(missing.json.error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    expect((await apiCall(locked, 'GET', '/v1/models', undefined, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    expect((await apiCall(locked, 'GET', '/v1/models', undefined, { headers: { authorization: 'Bearer sesame' } })).status).toBe(200);
  });

  test('a backend that is not serving answers 503', async () => {
    const loading = new LocalBackend(await testModelPath('stories260K.gguf'));
    const r = await apiCall(createOpenAiApi({ backend: loading }), 'POST', '/v1/completions', { prompt: 'x' });
    expect(r.status).toBe(503);
    expect(r.json.error.type).toBe('unavailable_error');
  });
});

describe('the request log', () => {
  test('every request is logged once with its status and tokens, streams when they end', async () => {
    logged.length = 0;
    await chat({ max_tokens: 3, temperature: 0 });
    await chat({ max_tokens: 3, temperature: 0, stream: true });
    await call('GET', '/v1/nothing');
    expect(logged.map((e) => [e.method, e.path, e.status, e.tokens])).toEqual([
      ['POST', '/v1/chat/completions', 200, 3],
      ['POST', '/v1/chat/completions', 200, 3],
      ['GET', '/v1/nothing', 404, 0],
    ]);
  });
});
