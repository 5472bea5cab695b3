// `kiwi serve --chat-template NAME --log-requests` as a real process: the template replaces the
// model's own (seen through POST /apply-template) and every request prints one line;
// `--draft-model` turns on speculative decoding with that drafter.
import { afterAll, expect, test } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import { ProcessSet, waitEvent } from '../engine/test-support/processes.js';

const procs = new ProcessSet();
afterAll(() => procs.dispose());

test('--chat-template llama3 renders prompts in Llama 3 format and --log-requests prints each request', async () => {
  const model = await testModelPath('stories260K.gguf');
  const p = procs.kiwi('serve', '--model', model, '--port', '0', '--threads', '1', '--chat-template', 'llama3', '--log-requests', '--json');
  const url = (await waitEvent(p, (e) => e.event === 'serving', 'kiwi serve', 60_000)).url as string;
  const base = url.replace(/\/v1$/, '');
  const r = await fetch(`${base}/apply-template`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }] }) });
  expect(((await r.json()) as { prompt: string }).prompt).toBe('<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n');
  const c = await fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Once', max_tokens: 3, temperature: 0 }) });
  expect(c.status).toBe(200);
  const line = await waitEvent(p, (e) => e.event === 'request' && e.path === '/v1/completions', 'the request line');
  expect(line).toMatchObject({ method: 'POST', status: 200, tokens: 3 });
  expect(p.events.find((e) => e.event === 'request' && e.path === '/apply-template')).toMatchObject({ method: 'POST', status: 200, tokens: 0 });
});

test('an unknown --chat-template is a usage error naming the built-ins', async () => {
  const model = await testModelPath('stories260K.gguf');
  const p = procs.kiwi('serve', '--model', model, '--port', '0', '--chat-template', 'no-such-template');
  expect(await p.exited).not.toBe(0);
  expect(p.stderr.join('\n')).toMatch(/chatml, llama3, gemma, mistral, plain/);
});

test('--draft-model turns on speculation with the draft model; /health names it as the drafter', async () => {
  const model = await testModelPath('stories260K.gguf');
  const p = procs.kiwi('serve', '--model', model, '--port', '0', '--threads', '1', '--draft-model', model, '--json');
  const url = (await waitEvent(p, (e) => e.event === 'serving', 'kiwi serve', 60_000)).url as string;
  const c = await fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Once', max_tokens: 16, temperature: 0 }) });
  expect(c.status).toBe(200);
  const health = (await (await fetch(`${url.replace(/\/v1$/, '')}/health`)).json()) as { speculative?: { mode: string; drafter: string } };
  expect(health.speculative).toMatchObject({ mode: 'auto', drafter: 'draft-model' });
});
