// The ring as real processes on loopback (a rendezvous, `kiwi host --model`, two `kiwi join`s) with
// ICE ring links: every link comes up as a direct UDP data channel, signaled through the host, and
// greedy output is exactly `kiwi generate`'s on one machine. With one member on `--no-ice`, the
// links to it fall back to WebSocket direct links and the text stays the same; with one on
// `--relay-only`, the links to it are relayed. In each, the plan predicted the kind each link became.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Event, type Proc, until, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
isolatedCacheDir('kiwi-ice-ring-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

async function reference(model: string, prompt: string, maxTokens: number): Promise<string> {
  const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', prompt, '--max-tokens', String(maxTokens), '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
  return (JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string }).text;
}

async function startRing(model: string, bobArgs: string[]): Promise<{ url: string; host: Proc; members: Proc[] }> {
  const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
  const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
  const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json');
  const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
  const members = [
    procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json'),
    procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--json', ...bobArgs),
  ];
  const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 60_000);
  return { url: serving.url as string, host, members };
}

/** The latest measured 'link' event per pair, once all three ring links reported one. */
async function measuredLinks(host: Proc): Promise<Map<string, Event>> {
  const latest = new Map<string, Event>();
  await until(async () => {
    for (const e of host.events) if (e.event === 'link' && typeof e.rtt_ms === 'number') latest.set(`${String(e.a)}-${String(e.b)}`, e);
    return latest.size === 3;
  }, 'three measured ring links', 30_000);
  return latest;
}

/** The first plan's predicted kind of each ring edge (planner/nat-reach.ts), by the names of its ends. */
async function predictedEdges(host: Proc): Promise<Map<string, string>> {
  const plan = await waitEvent(host, (e) => e.event === 'plan', 'the plan');
  const edges = plan.edges as Array<{ from: string; to: string; predicted: string }>;
  return new Map(edges.map((e) => [[e.from, e.to].sort().join('-'), e.predicted]));
}

describe('the ring over ICE links (real processes on loopback)', () => {
  it('forms every ring link as direct UDP and gives exactly the tokens of one machine', async () => {
    const model = await testModelPath('stories260K.gguf');
    const want = await reference(model, 'Once upon a time', 48);
    const ring = await startRing(model, []);
    const links = await measuredLinks(ring.host);
    expect([...links.values()].map((l) => [l.kind, l.transport])).toEqual([['direct', 'udp'], ['direct', 'udp'], ['direct', 'udp']]);
    // The planner predicted each of them: members on loopback measure an endpoint-independent mapping.
    expect([...(await predictedEdges(ring.host)).values()]).toEqual(['direct-udp', 'direct-udp', 'direct-udp']);
    expect([...links.values()].every((l) => typeof l.throughput_mbps === 'number' && l.throughput_mbps > 0)).toBe(true);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const completion = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 48, temperature: 0 });
    expect(completion.choices[0]?.text).toBe(want);
  }, 120_000);

  it('falls back to WebSocket links to a member with --no-ice, with the same text', async () => {
    const model = await testModelPath('stories260K.gguf');
    const want = await reference(model, 'Once upon a time', 48);
    const ring = await startRing(model, ['--no-ice']);
    const bob = ring.members[1] as Proc;
    const bobPeer = (await waitEvent(bob, (e) => e.event === 'joined', 'bob joined')).peer as number;
    const links = await measuredLinks(ring.host);
    for (const l of links.values()) expect([l.a, l.b, l.transport]).toEqual([l.a, l.b, l.a === bobPeer || l.b === bobPeer ? 'tcp' : 'udp']);
    // bob said it takes no ICE links (capability ice: false): the planner predicted TCP to it.
    for (const [pair, predicted] of await predictedEdges(ring.host)) expect([pair, predicted]).toEqual([pair, pair.includes('bob') ? 'direct-tcp' : 'direct-udp']);
    const client = new OpenAI({ baseURL: ring.url, apiKey: 'unused' });
    const completion = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 48, temperature: 0 });
    expect(completion.choices[0]?.text).toBe(want);
  }, 120_000);

  it('predicts and forms relayed links to a --relay-only member', async () => {
    const model = await testModelPath('stories260K.gguf');
    const ring = await startRing(model, ['--relay-only']);
    const bob = ring.members[1] as Proc;
    const bobPeer = (await waitEvent(bob, (e) => e.event === 'joined', 'bob joined')).peer as number;
    const links = await measuredLinks(ring.host);
    for (const l of links.values()) expect([l.a, l.b, l.transport]).toEqual([l.a, l.b, l.a === bobPeer || l.b === bobPeer ? 'relay' : 'udp']);
    // bob advertises no address: the planner predicted the relay to it.
    for (const [pair, predicted] of await predictedEdges(ring.host)) expect([pair, predicted]).toEqual([pair, pair.includes('bob') ? 'relayed' : 'direct-udp']);
  }, 120_000);
});
