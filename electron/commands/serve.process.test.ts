// `kiwi serve` as a real process: it prints where it serves, answers the OpenAI API with its key,
// and on SIGTERM stops accepting, ends its streams and exits 0.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import { kiwiEntry, ProcessSet, waitEvent } from '../engine/test-support/processes.js';

const procs = new ProcessSet();
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

describe('kiwi serve (a real process on loopback)', () => {
  it('prints its URL, serves the model, and on SIGTERM ends its streams and exits 0', async () => {
    const model = await testModelPath('stories260K.gguf');
    const p = procs.spawn(process.execPath, [...kiwiEntry(), 'serve', '--model', model, '--port', '0', '--threads', '1', '--no-shard-cache', '--json']);
    const serving = await waitEvent(p, (e) => e.event === 'serving', 'the serving event', 30_000);
    const url = serving.url as string;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const models = (await (await fetch(`${url}/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['stories260K']);

    // A stream in flight when the process is told to stop ends, and the process exits 0.
    const res = await fetch(`${url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1500, stream: true }) });
    const reader = res.body!.getReader();
    await reader.read();
    p.child.kill('SIGTERM');
    while (!(await reader.read()).done);
    expect(await p.exited).toBe(0);
    expect(p.events.at(-1)).toEqual({ event: 'stopped' });
  });

  it('requires the API key given in KIWI_API_KEY, and serves a split model', async () => {
    const model = await testModelPath('stories260K.gguf');
    const p = procs.spawn('env', ['KIWI_API_KEY=s3cret', process.execPath, ...kiwiEntry(), 'serve', '--model', model, '--split', '0-2,2-5', '--port', '0', '--threads', '1', '--no-shard-cache', '--json']);
    const url = (await waitEvent(p, (e) => e.event === 'serving', 'the serving event', 30_000)).url as string;
    expect((await fetch(`${url}/models`)).status).toBe(401);
    expect((await fetch(`${url}/models`, { headers: { authorization: 'Bearer s3cret' } })).status).toBe(200);
  });

  it('with --lan listens on all interfaces and warns when there is no API key', async () => {
    const model = await testModelPath('stories260K.gguf');
    const p = procs.spawn(process.execPath, [...kiwiEntry(), 'serve', '--model', model, '--lan', '--port', '0', '--threads', '1', '--no-shard-cache', '--cors-origin', 'https://chat.example', '--json']);
    const serving = await waitEvent(p, (e) => e.event === 'serving', 'the serving event', 30_000);
    expect(serving.host).toBe('0.0.0.0');
    expect((await fetch(`${serving.url as string}/models`)).status).toBe(200);
    expect(p.stderr.join('\n')).toMatch(/without --api-key/);
    expect(p.events.find((e) => e.event === 'warning')).toMatchObject({ code: 'API_UNPROTECTED', message: expect.stringMatching(/0\.0\.0\.0 without --api-key/) });
    // --cors-origin: that page may call from a browser; others may not.
    const preflight = (origin: string) => fetch(`${serving.url as string}/chat/completions`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
    expect((await preflight('https://chat.example')).headers.get('access-control-allow-origin')).toBe('https://chat.example');
    expect((await preflight('https://other.example')).status).toBe(403);
  });
});
