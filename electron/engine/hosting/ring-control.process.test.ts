// `kiwi host --model M --ui-port 0` as a real process with a `kiwi join` member: it prints the UI's
// address with its token, and that control API's /api/status shows the ring's plan and links.
import { afterAll, describe, expect, it } from 'vitest';
import { SessionStatus } from '../../../common/control-api.js';
import { testModelPath } from '../model/test-models.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, waitEvent } from '../test-support/processes.js';

const procs = new ProcessSet();
isolatedCacheDir('kiwi-ui-port-');
afterAll(() => procs.dispose());

describe('kiwi host --ui-port', () => {
  it('serves the UI\'s control API over the running ring, with its plan and links', async () => {
    const model = await testModelPath('stories260K.gguf');
    const host = procs.spawn(process.execPath, [
      ...kiwiEntry(), 'host', '--model', model, '--port', '0', '--ui-port', '0', '--auto-approve', '--expect', '1', '--context', '64',
      '--rendezvous-host', '127.0.0.1', '--listen', '127.0.0.1', '--no-shard-cache', '--json',
    ]);
    const session = await waitEvent(host, (e) => e.event === 'session', 'the session code');
    const ui = await waitEvent(host, (e) => e.event === 'ui', 'the UI address');
    const url = new URL(ui.url as string);
    const token = new URLSearchParams(url.hash.slice(1)).get('token') ?? '';
    expect(token.length).toBeGreaterThan(10);
    procs.spawn(process.execPath, [...kiwiEntry(), 'join', session.code as string, '--rendezvous', session.rendezvous as string, '--name', 'ada', '--listen', '127.0.0.1', '--no-shard-cache', '--json']);
    await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000);

    const res = await fetch(`${ui.api_url as string}/status`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const s = SessionStatus.parse(await res.json());
    expect(s.role).toBe('host');
    expect(s.code).toBe(session.code);
    expect(s.serving?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(s.plan?.layers).toBe(5);
    expect(s.plan?.stages.map((x) => [x.peer === 0 ? 'host' : x.name, x.head])).toEqual([['host', true], ['ada', false]]);
    expect(s.plan?.stages.at(-1)?.end).toBe(5);
    expect(s.links).toEqual([expect.objectContaining({ a: 0, state: 'up' })]);
    expect(s.plan_error).toBeNull();
  }, 120_000);
});
