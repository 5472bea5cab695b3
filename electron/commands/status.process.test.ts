// `kiwi status` against a running ring of real processes on loopback: a host serving stories260K
// over two members; `kiwi status --json` (no --host: the only host) lists the members, their
// stages, the ring links and its phase, read through the control API with the token from the
// host's 0600 file; `--host` picks a member, and the plain text shows the layers counted from 1.
// The host's weights-progress events end with one exact final event per member.
import { execFile } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Proc, until, waitEvent } from '../engine/test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
isolatedCacheDir('kiwi-status-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const kiwi = (...args: string[]): Proc => procs.kiwi(...args);

async function kiwiStatus(...args: string[]): Promise<{ stdout: string; code: number }> {
  try {
    const { stdout } = await run(process.execPath, [...kiwiEntry(), 'status', ...args], { cwd: repoRoot });
    return { stdout, code: 0 };
  } catch (err) {
    const e = err as { stdout: string; code: number };
    return { stdout: e.stdout, code: e.code };
  }
}

type Status = {
  role: string; api_url: string; ring: number[]; members: Array<{ name: string; peer: number; state: string; in_ring: boolean }>;
  links: Array<{ a: number; b: number; state: string; rtt_ms: number | null }>; ring_state: { phase: string } | null;
  plan: { stages: Array<{ name: string; start: number; end: number; head: boolean; state: string | null }>; layers: number; tokens_per_s: number | null } | null;
  assignment: { start: number; end: number } | null; phase: string;
};

describe('kiwi status (real processes on loopback)', () => {
  it('reports the ring of a running host, and of a member with --host', async () => {
    expect((await kiwiStatus('--json')).code).not.toBe(0);
    const model = await testModelPath('stories260K.gguf');
    const rv = kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code')).code as string;
    const control = await waitEvent(host, (e) => e.event === 'control', 'where the host keeps its token');
    // Only this user may read the token.
    expect((await stat(control.token_file as string)).mode & 0o777).toBe(0o600);
    const members = ['ada', 'bob'].map((name) => kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--json'));
    await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 90_000);

    let status = {} as Status;
    await until(async () => {
      const r = await kiwiStatus('--json');
      status = JSON.parse(r.stdout) as Status;
      return status.links.filter((l) => l.state === 'up' && l.rtt_ms !== null).length === 3 && status.plan?.stages.every((s) => s.state === 'ready' || s.state === 'kept') === true;
    }, 'three measured links and every stage ready', 30_000);
    expect(status.role).toBe('host');
    expect(status.api_url).toBe(control.api_url);
    expect(status.ring_state?.phase).toBe('serving');
    expect(status.members.map((m) => [m.name, m.state, m.in_ring]).sort()).toEqual([['ada', 'active', true], ['bob', 'active', true]]);
    expect(status.ring).toHaveLength(3);
    // The stages cover every layer once, in order.
    const stages = status.plan?.stages ?? [];
    expect(stages[0]?.start).toBe(0);
    for (let i = 1; i < stages.length; i++) expect(stages[i]?.start).toBe(stages[i - 1]?.end);
    expect(stages.at(-1)?.end).toBe(status.plan?.layers);

    const text = await kiwiStatus();
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^Host \(pid \d+, http:\/\/127\.0\.0\.1:\d+\/api\): serving$/m);
    expect(text.stdout).toMatch(/Members:\n\s+PEER\s+NAME\s+STATE/);
    // Layers counted from 1, both ends named: the host holds layer 1 and the head.
    expect(text.stdout).toMatch(/ layers? 1(–\d+ \(\d+ layers\))? \+ head /);

    // A member: the host is the default, --host names the member's control API.
    const memberControl = await waitEvent(members[0] as Proc, (e) => e.event === 'control', 'where the member keeps its token');
    let mine = {} as Status;
    await until(async () => {
      mine = JSON.parse((await kiwiStatus('--json', '--host', memberControl.api_url as string)).stdout) as Status;
      return mine.assignment !== null;
    }, 'the member to show its assignment', 20_000);
    expect(mine.role).toBe('member');
    expect(mine.phase).toBe('active');
    expect(stages.some((s) => s.name === 'ada' && s.start === mine.assignment?.start && s.end === mine.assignment?.end)).toBe(true);

    // Both members received their layers from the host: each transfer ends with one exact final progress event.
    for (const name of ['ada', 'bob']) {
      const progress = host.events.filter((e) => e.event === 'weights-progress' && e.name === name);
      expect(progress.filter((e) => e.final === true)).toHaveLength(1);
      expect(progress.at(-1)).toMatchObject({ final: true, eta_s: 0 });
      expect(progress.at(-1)?.received_bytes).toBe(progress.at(-1)?.total_bytes);
    }

    // An address nobody of this user runs at is refused, not guessed.
    expect((await kiwiStatus('--json', '--host', 'http://127.0.0.1:1/api')).code).not.toBe(0);
  });
});
