// `kiwi rendezvous`, `kiwi host` and `kiwi join` as real processes on loopback: a session forms
// from a code, a wrong code is refused and cannot be retried without limit, and a member killed
// with SIGKILL is soft- then hard-evicted and can rejoin.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { formatSessionCode, parseSessionCode } from '../engine/session/session-code.js';
import { askStatus, isolatedCacheDir, ProcessSet, until, waitEvent, type Proc } from '../engine/test-support/processes.js';

// Members keep their identity keys in the cache folder: this file's own.
isolatedCacheDir('kiwi-session-process-');
const procs = new ProcessSet();
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function startRendezvous(...extra: string[]): Promise<string> {
  const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json', ...extra);
  return (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous to listen')).url as string;
}

describe('kiwi rendezvous, host and join (real processes on loopback)', () => {
  it('a rendezvous, a host and three members form a session from a code', async () => {
    const url = await startRendezvous();
    const host = kiwi('host', '--rendezvous', url, '--auto-approve', '--expect', '3', '--json');
    const session = await waitEvent(host, (e) => e.event === 'session', 'the session code');
    expect(session.code).toMatch(/^\d+-[a-z]+-[a-z]+-[a-z]+$/);
    const members = ['ada', 'bob', 'cy'].map((name) => kiwi('join', session.code as string, '--rendezvous', url, '--name', name, '--json'));
    for (const m of members) expect((await waitEvent(m, (e) => e.event === 'joined', 'joined')).state).toBe('active');
    await waitEvent(host, (e) => e.event === 'members-ready', 'members-ready');
    const joined = host.events.filter((e) => e.event === 'member-joined').map((e) => e.name);
    expect([...joined].sort()).toEqual(['ada', 'bob', 'cy']);
    // The ring host -> m1 -> m2 -> m3 -> host has four links, each measured.
    const start = Date.now();
    while (host.events.filter((e) => e.event === 'link' && typeof e.rtt_ms === 'number').length < 4) {
      if (Date.now() - start > 20_000) throw new Error(`ring links did not come up: ${JSON.stringify(host.events)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // Direct when the dial answers within its 2 s timeout; on a loaded machine a link may fall back
    // to the relay, which is the designed behaviour (the relay tests cover that path).
    expect(host.events.filter((e) => e.event === 'link').every((e) => e.kind === 'direct' || e.kind === 'relayed')).toBe(true);
    // The status listing: members, state, addresses, links with kind and RTT. (The link events above
    // may include a link of an earlier ring, from before the last member joined: ask until all four are measured.)
    let status: Record<string, unknown> = {};
    await until(async () => {
      status = await askStatus(host);
      return (status.links as Array<{ rttMs?: number }>).filter((l) => l.rttMs !== undefined).length === 4;
    }, 'four measured ring links', 20_000);
    const listed = status.members as Array<{ name: string; state: string; addresses: string[] }>;
    expect(listed.map((m) => [m.name, m.state]).sort()).toEqual([['ada', 'active'], ['bob', 'active'], ['cy', 'active']]);
    for (const m of listed) expect(m.addresses[0]).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    const links = status.links as Array<{ kind: string; rttMs: number }>;
    expect(links).toHaveLength(4);
    for (const l of links) expect(l.rttMs).toBeGreaterThan(0);
  });

  it('refuses a wrong code, and after repeated failures refuses even the right one', async () => {
    const url = await startRendezvous('--max-failed-attempts', '3');
    const host = kiwi('host', '--rendezvous', url, '--auto-approve', '--json');
    const code = parseSessionCode((await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string);
    const wrong = formatSessionCode({ ...code, words: [...code.words.slice(0, 2), code.words[2] === 'kiwi' ? 'lemon' : 'kiwi'] });
    const errors: string[] = [];
    for (let i = 0; i < 4; i++) {
      const m = kiwi('join', wrong, '--rendezvous', url, '--name', 'mallory', '--json');
      expect(await m.exited).not.toBe(0);
      errors.push(String((await waitEvent(m, (e) => e.event === 'error', 'the error event')).code));
      // The rendezvous counts a failure when the socket closes; let it see this one first.
      await waitEvent(host, (e) => e.event === 'join-failed' && host.events.filter((x) => x.event === 'join-failed').length >= Math.min(i + 1, 3), 'the failure count', 10_000);
    }
    expect(errors).toEqual(['PAKE_CONFIRMATION_FAILED', 'PAKE_CONFIRMATION_FAILED', 'PAKE_CONFIRMATION_FAILED', 'NAMEPLATE_CLOSED']);
    const right = kiwi('join', formatSessionCode(code), '--rendezvous', url, '--name', 'late', '--json');
    expect(await right.exited).not.toBe(0);
    expect((await waitEvent(right, (e) => e.event === 'error', 'the error event')).code).toBe('NAMEPLATE_CLOSED');
    expect(right.stderr.join('\n')).toMatch(/no more members/);
  });

  it('soft- then hard-evicts a member killed with SIGKILL, and lets it rejoin', async () => {
    const host = kiwi('host', '--auto-approve', '--soft-evict-ms', '800', '--hard-evict-ms', '2000', '--json');
    const session = await waitEvent(host, (e) => e.event === 'session', 'the session code');
    const args = ['join', session.code as string, '--rendezvous', session.rendezvous as string, '--name', 'kim', '--member-id', 'kim-laptop-1', '--heartbeat-ms', '100', '--json'];
    const first = kiwi(...args);
    const firstId = (await waitEvent(first, (e) => e.event === 'joined', 'joined')).member_id;
    expect(firstId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    first.child.kill('SIGKILL');
    await first.exited;
    const soft = await waitEvent(host, (e) => e.event === 'member-left' && e.reason === 'soft-evicted', 'soft eviction');
    const hard = await waitEvent(host, (e) => e.event === 'member-left' && e.reason === 'hard-evicted', 'hard eviction');
    expect(host.events.indexOf(soft)).toBeLessThan(host.events.indexOf(hard));
    const again = kiwi(...args);
    await waitEvent(again, (e) => e.event === 'joined', 'joined again');
    const rejoined = await waitEvent(host, (e) => e.event === 'member-joined' && e.rejoined === true, 'the rejoin');
    // The same key from the cache folder: the same member id, without approving it again.
    expect(rejoined).toMatchObject({ name: 'kim', member_id: firstId });
  });

  it('approves by the fingerprint both screens show, and refuses a name an impostor shares', async () => {
    const host = kiwi('host', '--json');
    const session = await waitEvent(host, (e) => e.event === 'session', 'the session code');
    const join = (...extra: string[]): Proc => kiwi('join', session.code as string, '--rendezvous', session.rendezvous as string, '--name', 'ada', '--json', ...extra);
    const friend = join();
    const friendFp = (await waitEvent(friend, (e) => e.event === 'joined', 'the friend waiting')).fingerprint as string;
    expect(friendFp).toMatch(/^[0-9a-z]{4}-[0-9a-z]{4}$/);
    expect(await waitEvent(host, (e) => e.event === 'member-pending' && e.fingerprint === friendFp, 'the friend on the host')).toMatchObject({ name: 'ada' });
    // Another machine (another key) under the same name.
    const impostor = join('--member-id', 'another-machine');
    const impostorFp = (await waitEvent(impostor, (e) => e.event === 'joined', 'the impostor waiting')).fingerprint as string;
    await waitEvent(host, (e) => e.event === 'member-pending' && e.fingerprint === impostorFp, 'the impostor on the host');
    host.child.stdin?.write('approve ada\n');
    const refused = await waitEvent(host, (e) => e.event === 'error' && e.code === 'MEMBER_AMBIGUOUS', 'the refusal');
    expect(refused.message).toContain(friendFp);
    expect(refused.message).toContain(impostorFp);
    host.child.stdin?.write(`approve ${friendFp.toUpperCase()}\n`);
    await waitEvent(friend, (e) => e.event === 'approved', 'the friend approved');
    expect(await waitEvent(host, (e) => e.event === 'member-joined', 'the join')).toMatchObject({ name: 'ada', fingerprint: friendFp });
    const status = await askStatus(host);
    const states = (status.members as Array<{ fingerprint: string; state: string }>).map((m) => [m.fingerprint, m.state]);
    expect(states.sort()).toEqual([[friendFp, 'active'], [impostorFp, 'pending']].sort());
    expect(impostor.events.some((e) => e.event === 'approved')).toBe(false);
  });
});
