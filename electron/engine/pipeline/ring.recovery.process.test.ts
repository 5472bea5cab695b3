// Recovery with real processes on loopback: a member killed with SIGKILL in the middle of a
// streamed generation, and one that leaves gracefully. The host re-plans over the members left,
// every live request rebuilds its caches on the new ring (its prompt as a prefill, then one decode
// step per token it had generated), and the client's stream simply continues: its full text equals
// the text of a ring that never failed.
// (The randomized fault suite is ring.faults.process.test.ts and bench/faults.ts.)
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { ProcessSet, type Proc, until, waitEvent } from '../test-support/processes.js';

const procs = new ProcessSet();
let current: Ring | undefined;
afterEach((ctx) => {
  // What the host and members said, when a recovery went wrong.
  if (ctx.task.result?.state === 'fail' && current !== undefined) {
    for (const [name, p] of [['host', current.host] as const, ...current.members]) {
      console.error(`--- ${name}\n${p.events.map((e) => JSON.stringify(e)).join('\n')}\n${p.stderr.join('').slice(-4000)}`);
    }
  }
  current = undefined;
  procs.killAll();
});
afterAll(() => procs.dispose());

interface Ring {
  url: string;
  host: Proc;
  members: Map<string, Proc>;
  code: string;
  rendezvous: string;
}

async function startRing(model: string, names: string[], hostArgs: string[] = []): Promise<Ring> {
  const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', String(names.length), '--json', ...hostArgs);
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  const members = new Map(names.map((name) => [name, procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--model', model, '--json')]));
  current = { url: '', host, members, code, rendezvous };
  const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000);
  current.url = serving.url as string;
  return current;
}

/** Streams a greedy completion; `onToken(n)` runs after the n-th streamed piece. */
async function stream(url: string, prompt: string, maxTokens: number, onToken: (n: number) => void = () => {}): Promise<string> {
  const client = new OpenAI({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
  const s = await client.completions.create({ model: 'stories260K', prompt, max_tokens: maxTokens, temperature: 0, stream: true });
  let text = '';
  let n = 0;
  for await (const chunk of s) {
    text += chunk.choices[0]?.text ?? '';
    onToken(++n);
  }
  return text;
}

describe('recovery when members go (real processes on loopback)', () => {
  it('continues a stream exactly when a member is killed mid-decode, and when one leaves gracefully', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['ada', 'bob', 'cat']);
    const prompt = 'Once upon a time, there was a little girl named Lily.';
    const reference = await stream(ring.url, prompt, 200);
    expect(reference.length).toBeGreaterThan(100);

    // SIGKILL bob after 30 streamed tokens: the host re-plans over ada and cat and the stream goes on.
    const bob = ring.members.get('bob')!;
    const afterKill = await stream(ring.url, prompt, 200, (n) => {
      if (n === 30) bob.child.kill('SIGKILL');
    });
    expect(afterKill).toBe(reference);
    const recovered = await waitEvent(ring.host, (e) => e.event === 'recovered', 'the recovery');
    expect(recovered).toMatchObject({ epoch: 2 });
    expect(recovered.resumed_requests as number).toBeGreaterThanOrEqual(1);

    // cat leaves gracefully (SIGINT): it hands its layers back first, and the next stream is exact too.
    const cat = ring.members.get('cat')!;
    const leaving = stream(ring.url, prompt, 200, (n) => {
      if (n === 20) cat.child.kill('SIGINT');
    });
    expect(await leaving).toBe(reference);
    await until(async () => cat.child.exitCode !== null, 'cat to exit', 30_000);
    expect(cat.child.exitCode).toBe(0);
    expect(await stream(ring.url, prompt, 200)).toBe(reference);

    // bob comes back with his identity while a stream runs: he is planned in at a safe point and the stream stays exact.
    const bobId = ring.host.events.find((e) => e.event === 'member-joined' && e.name === 'bob')!.member_id as string;
    const replans = ring.host.events.filter((e) => e.event === 'recovered').length;
    const model2 = await testModelPath('stories260K.gguf');
    const back = procs.kiwi('join', ring.code, '--rendezvous', ring.rendezvous, '--name', 'bob', `--member-id=${bobId}`, '--model', model2, '--json');
    ring.members.set('bob again', back);
    await waitEvent(back, (e) => e.event === 'joined', 'bob to rejoin');
    const during = stream(ring.url, prompt, 200);
    await waitEvent(back, (e) => e.event === 'ready', 'bob to be planned in again', 30_000);
    expect(await during).toBe(reference);
    await until(async () => ring.host.events.filter((e) => e.event === 'recovered').length > replans, 'the re-plan with bob', 30_000);
    expect(ring.host.events.findLast((e) => e.event === 'plan')!.order).toContain('bob');
    expect(await stream(ring.url, prompt, 200)).toBe(reference);
  }, 90_000);

  it('holds requests while no member can run the blocks, resumes them when one returns, and fails them clearly after the timeout', async () => {
    const model = await testModelPath('stories260K.gguf');
    // Long enough for a restarted member to start and load on a loaded machine; the second part waits it out.
    const ring = await startRing(model, ['ada'], ['--recovery-timeout', '40']);
    const prompt = 'Once upon a time, there was a little girl named Lily.';
    const reference = await stream(ring.url, prompt, 120);
    const adaId = ring.host.events.find((e) => e.event === 'member-joined' && e.name === 'ada')!.member_id as string;
    // Member ids are base64url and may start with '-': given as --member-id=ID, never read as a flag.
    const ada = ring.members.get('ada')!;

    // ada dies mid-stream; nobody is left, so the stream waits, and continues exactly once she is back.
    const waiting = stream(ring.url, prompt, 120, (n) => {
      if (n === 10) ada.child.kill('SIGKILL');
    });
    await waitEvent(ring.host, (e) => e.event === 'waiting', 'the host to wait for members', 20_000);
    const health = (await (await fetch(ring.url.replace(/\/v1$/, '/health'))).json()) as { ring: { phase: string; waiting_until?: string } };
    expect(health.ring.phase).toBe('waiting');
    expect(health.ring.waiting_until).toBeDefined();
    ring.members.set('ada again', procs.kiwi('join', ring.code, '--rendezvous', ring.rendezvous, '--name', 'ada', `--member-id=${adaId}`, '--model', model, '--json'));
    expect(await waiting).toBe(reference);

    // Killed again, and nobody returns within --recovery-timeout: the request fails with a clear 503.
    const again = ring.members.get('ada again')!;
    const failing = stream(ring.url, prompt, 120, (n) => {
      if (n === 10) again.child.kill('SIGKILL');
    });
    await expect(failing).rejects.toThrow(/cannot hold the model/);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused', maxRetries: 0 });
    const refused = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 8 }).then(() => undefined, (err: unknown) => err);
    expect(refused).toMatchObject({ status: 503, code: 'ring_unavailable' });
  }, 180_000);

  it('plans a member out when its free memory drops below its reserve, without breaking a stream', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['ada', 'bob']);
    const prompt = 'Once upon a time, there was a little girl named Lily.';
    const reference = await stream(ring.url, prompt, 200);
    // cat keeps more memory free than any machine has: once assigned, she asks to be planned out.
    const cat = procs.kiwi('join', ring.code, '--rendezvous', ring.rendezvous, '--name', 'cat', '--model', model, '--keep-free-mb', String(2 ** 30), '--json');
    ring.members.set('cat', cat);
    const during = stream(ring.url, prompt, 200);
    await waitEvent(cat, (e) => e.event === 'memory' && e.low === true, 'cat to run short of memory', 30_000);
    expect(await during).toBe(reference);
    await until(async () => ring.host.events.some((e) => e.event === 'recovered' && /short of memory/.test(e.reason as string)), 'the re-plan without cat', 30_000);
    expect(ring.host.events.findLast((e) => e.event === 'plan')!.order).not.toContain('cat');
    expect(await stream(ring.url, prompt, 200)).toBe(reference);
  }, 120_000);
});
