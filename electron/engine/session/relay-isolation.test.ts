// Two members that cannot reach each other directly: their ring link goes through the relay,
// carries data both ways, and the relay (its debug hook logs every relayed payload) sees no
// plaintext. With root and iproute2 the members live in separate network namespaces joined only
// to the rendezvous's namespace by veth pairs; without them, the members advertise a direct
// address nobody listens on, which exercises the same fallback on loopback.
import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canUseNetns } from '../test-support/netns-star.js';
import { ProcessSet, tsEntry, waitEvent, type Proc } from '../test-support/processes.js';

const procs = new ProcessSet();
const tag = String(process.pid % 100000);
const ns = { rv: `kiwi-rv-${tag}`, a: `kiwi-a-${tag}`, b: `kiwi-b-${tag}` };
const dump = join(tmpdir(), `kiwi-relay-dump-${tag}.log`);
const SECRET = 'plaintext-activations-7f3a';

// Where namespaces cannot be made the test runs on loopback; a missing `ip` fails, saying what to install.
const useNetns = canUseNetns();

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });

function setUpNamespaces(): void {
  for (const n of Object.values(ns)) ip('netns', 'add', n);
  // veth pairs: A <-> RV on 10.77.1.0/24, B <-> RV on 10.77.2.0/24; RV does not forward.
  for (const [side, subnet] of [['a', 1], ['b', 2]] as const) {
    const inner = `k${tag}${side}`;
    const outer = `k${tag}${side}r`;
    ip('link', 'add', inner, 'type', 'veth', 'peer', 'name', outer);
    ip('link', 'set', inner, 'netns', ns[side]);
    ip('link', 'set', outer, 'netns', ns.rv);
    ip('-n', ns[side], 'addr', 'add', `10.77.${subnet}.2/24`, 'dev', inner);
    ip('-n', ns.rv, 'addr', 'add', `10.77.${subnet}.1/24`, 'dev', outer);
    ip('-n', ns[side], 'link', 'set', inner, 'up');
    ip('-n', ns.rv, 'link', 'set', outer, 'up');
  }
  for (const n of Object.values(ns)) ip('-n', n, 'link', 'set', 'lo', 'up');
  execFileSync('ip', ['netns', 'exec', ns.rv, 'sysctl', '-qw', 'net.ipv4.ip_forward=0']);
}

function tearDownNamespaces(): void {
  for (const n of Object.values(ns)) {
    try {
      ip('netns', 'del', n);
    } catch {
      // Not created (setup failed part way): nothing to remove.
    }
  }
}

function node(where: string | undefined, ...args: string[]): Proc {
  const script = tsEntry('electron/engine/test-support/netns-node.ts');
  return where === undefined ? procs.spawn(process.execPath, [...script, ...args]) : procs.spawn('ip', ['netns', 'exec', where, process.execPath, ...script, ...args]);
}

beforeAll(async () => {
  if (useNetns) setUpNamespaces();
});
afterAll(async () => {
  procs.dispose();
  if (useNetns) tearDownNamespaces();
  const { rm } = await import('node:fs/promises');
  await rm(dump, { force: true });
});

describe(`relay between members that cannot connect directly (${useNetns ? 'network namespaces' : 'unreachable advertised addresses on loopback'})`, () => {
  it('carries their ring link through the relay, which sees only ciphertext', async () => {
    const rv = useNetns ? node(ns.rv, 'rendezvous', '0.0.0.0', '7420', dump) : node(undefined, 'rendezvous', '127.0.0.1', '0', dump);
    const rvUrl = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const port = new URL(rvUrl).port;
    const host = useNetns ? node(ns.rv, 'host', `ws://127.0.0.1:${port}`, 'none') : node(undefined, 'host', rvUrl, 'none');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    const [a, b] = useNetns
      ? [
          node(ns.a, 'member', code, `ws://10.77.1.1:${port}`, '10.77.1.2', 'ann', SECRET),
          node(ns.b, 'member', code, `ws://10.77.2.1:${port}`, '10.77.2.2', 'ben', SECRET),
        ]
      : [
          node(undefined, 'member', code, rvUrl, '127.0.0.1', 'ann', SECRET, 'ws://127.0.0.1:1'),
          node(undefined, 'member', code, rvUrl, '127.0.0.1', 'ben', SECRET, 'ws://127.0.0.1:1'),
        ];
    await waitEvent(a, (e) => e.event === 'joined', 'ann to join');
    await waitEvent(b, (e) => e.event === 'joined', 'ben to join');
    const fromBen = await waitEvent(a, (e) => e.event === 'message', 'ben\'s message at ann');
    const fromAnn = await waitEvent(b, (e) => e.event === 'message', 'ann\'s message at ben');
    expect(fromBen.text).toBe(`${SECRET} from ben`);
    expect(fromAnn.text).toBe(`${SECRET} from ann`);
    const memberLink = a.events.find((e) => e.event === 'link' && e.state === 'up' && e.peer !== 0);
    expect(memberLink?.kind).toBe('relayed');

    const relayed = (await readFile(dump, 'utf8')).trim().split('\n');
    expect(relayed.length).toBeGreaterThan(4);
    const secretHex = Buffer.from(SECRET).toString('hex');
    for (const line of relayed) {
      expect(line.includes(secretHex)).toBe(false);
      // Nor the members' names and identities from their hello to the host.
      expect(line.includes(Buffer.from('"name":"ann"').toString('hex'))).toBe(false);
    }
  });
});
