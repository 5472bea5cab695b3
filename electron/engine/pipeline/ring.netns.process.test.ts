// The ring exactness test across network namespaces: the rendezvous and host in one namespace,
// each member in its own, all joined by veth pairs to a bridge in a fourth, so every ring link is a
// real (virtual) network path between separate network stacks. Greedy output through the host's
// API equals `kiwi generate` on one machine. Needs root and iproute2; where namespaces cannot be
// made (not Linux, not root, a container without CAP_SYS_ADMIN) the same processes run on loopback
// (the loopback suite, ring.process.test.ts, covers more there); a missing `ip` fails, saying what to install.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { canUseNetns, createNetnsStar, netnsWhyNot, type NetnsStar } from '../test-support/netns-star.js';
import { kiwiEntry, ProcessSet, repoRoot, waitEvent, type Proc } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const useNetns = canUseNetns();
let star: NetnsStar | undefined;

function kiwiIn(where: 'h' | 'a' | 'b', ...args: string[]): Proc {
  const cmd = [process.execPath, ...kiwiEntry(), ...args];
  const prefix = star?.exec(where) ?? [];
  const all = [...prefix, ...cmd];
  return procs.spawn(all[0]!, all.slice(1));
}

let dir: string;
let savedCacheDir: string | undefined;

beforeAll(async () => {
  // The processes' shard cache and received weights (ip netns exec passes the environment on).
  dir = await mkdtemp(join(tmpdir(), 'kiwi-ring-netns-'));
  savedCacheDir = process.env.KIWI_CACHE_DIR;
  process.env.KIWI_CACHE_DIR = dir;
  if (useNetns) star = createNetnsStar(['h', 'a', 'b']);
});
afterAll(async () => {
  procs.dispose();
  star?.tearDown();
  if (savedCacheDir === undefined) delete process.env.KIWI_CACHE_DIR;
  else process.env.KIWI_CACHE_DIR = savedCacheDir;
  await rm(dir, { recursive: true, force: true });
});

describe(`the ring across ${useNetns ? 'network namespaces' : `loopback (no network namespaces: ${netnsWhyNot()})`}`, () => {
  it('gives exactly the tokens of one machine', async () => {
    const model = await testModelPath('stories260K.gguf');
    const listen = (side: 'h' | 'a' | 'b'): string => star?.addr[side] ?? '127.0.0.1';
    const rv = kiwiIn('h', 'rendezvous', '--host', listen('h'), '--port', '0', '--json');
    const rvUrl = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = kiwiIn('h', 'host', '--model', model, '--port', '0', '--rendezvous', rvUrl, '--auto-approve', '--expect', '2', '--listen', listen('h'), '--weights-http', 'off', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    const members = (['a', 'b'] as const).map((side) => kiwiIn(side, 'join', code, '--rendezvous', rvUrl, '--name', `m${side}`, '--listen', listen(side), '--json'));
    const url = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000)).url as string;
    for (const m of members) expect((await waitEvent(m, (e) => e.event === 'ready', 'a member ready')).source).toBe('host');
    const links = host.events.filter((e) => e.event === 'link' && typeof e.rtt_ms === 'number');
    // Direct when the dial succeeds within its timeout; on a loaded machine a link may fall back to
    // the relay, which is correct behaviour too. Either way the tokens must be exact.
    expect(links.length).toBeGreaterThanOrEqual(3);
    expect(links.every((e) => e.kind === 'direct' || e.kind === 'relayed')).toBe(true);

    const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', 'Once upon a time', '--max-tokens', '40', '--json'], { cwd: repoRoot });
    const reference = JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string; ids: number[] };
    // The API listens on the host namespace's loopback: ask from inside it.
    const body = JSON.stringify({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
    const script = `fetch(process.argv[1] + '/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: process.argv[2] }).then((r) => r.text()).then((t) => process.stdout.write(t))`;
    const client = [...(star?.exec('h') ?? []), process.execPath, '-e', script, url, body];
    const answer = JSON.parse((await run(client[0]!, client.slice(1))).stdout) as { choices: Array<{ text: string }>; usage: { completion_tokens: number } };
    expect(answer.choices[0]?.text).toBe(reference.text);
    expect(answer.usage.completion_tokens).toBe(reference.ids.length);
  }, 120_000);
});
