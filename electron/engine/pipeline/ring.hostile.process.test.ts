// Hostile members with real processes on loopback (issue 12): a rendezvous, `kiwi host` (zstd on
// every link), an honest `kiwi join` member, and one hostile member after another
// (test-support/hostile-member.ts: a real member of the session that answers the first step it
// gets with crafted ring messages, to both of its ring neighbours). Each malformed kind must leave
// the host and the honest member up, name the offender in a warning, re-plan the ring without it
// and keep serving exactly the text of one machine. NaN activations are a precision problem: the
// request fails with 502 ring_member_numeric and the member is not planned out.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { generateReference, streamCompletion, type HostStatus } from '../test-support/fault-ring.js';
import { ATTACKS, type Attack } from '../test-support/hostile-attacks.js';
import { askStatus, isolatedCacheDir, kiwiEntry, ProcessSet, tsEntry, waitEvent, type Proc } from '../test-support/processes.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-hostile-');
afterAll(() => procs.dispose());

/** Little memory each, so every member gets layers while the host and the honest member hold the model without the hostile one. */
const SMALL = 64 * 1024 * 1024;
const PROMPT = 'Once upon a time';
const TOKENS = 24;

const alive = (p: Proc): boolean => p.child.exitCode === null && p.child.signalCode === null;

async function hostStatus(host: Proc): Promise<HostStatus> {
  return (await askStatus(host)) as unknown as HostStatus;
}

async function waitStatus(host: Proc, check: (s: HostStatus) => boolean, what: string, timeoutMs = 90_000): Promise<HostStatus> {
  const started = Date.now();
  for (;;) {
    const s = await hostStatus(host);
    if (check(s)) return s;
    if (!alive(host)) throw new Error(`the host exited before ${what}: ${host.stderr.join('\n')}`);
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}: ${JSON.stringify({ phase: s.phase, stages: s.stages })}\n${JSON.stringify(host.events.filter((e) => e.event !== 'status' && e.event !== 'weights-progress'))}\n${host.stderr.join('\n')}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const serving = (name: string, included: boolean) => (s: HostStatus): boolean =>
  s.phase === 'serving' && s.stages.length > 0 && s.stages.every((x) => x.state === 'ready' || x.state === 'kept') && s.stages.some((x) => x.name === name) === included;

describe('a ring with hostile members (real processes, loopback)', () => {
  it('stays up and keeps serving through every malformed frame kind, oversized declared sizes, wrong shapes, floods and NaN activations', async () => {
    const model = await testModelPath('stories260K.gguf');
    const want = (await generateReference(model, PROMPT, TOKENS)).text;
    const caps = join(tempDir(), 'capabilities.json');
    await writeFile(caps, JSON.stringify({ fleet_device: { memory_bytes: SMALL } }));
    const rv = procs.spawn(process.execPath, [...kiwiEntry(), 'rendezvous', '--host', '127.0.0.1', '--port', '0', '--json']);
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous', 30_000)).url as string;
    const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--zstd', 'on',
      '--heartbeat-timeout', '20', '--recovery-timeout', '60', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 30_000)).code as string;
    const ada = procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--capabilities', caps, '--model', model, '--heartbeat-ms', '500', '--json');
    const hostile = (i: number, attack: Attack): Proc =>
      procs.spawn(process.execPath, [...tsEntry('electron/engine/test-support/hostile-member.ts'), code, rendezvous, `mallory${i}`, attack, '64', caps]);

    // NaN last: that member stays in the ring (a precision problem), and is then stopped.
    const attacks = [...ATTACKS.filter((a) => a !== 'nan'), 'nan' as const];
    let url = '';
    for (const [i, attack] of attacks.entries()) {
      const name = `mallory${i}`;
      const m = hostile(i, attack);
      if (i === 0) {
        url = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 120_000).then((e) => e.url as string, (err: unknown) => {
          throw new Error(`${String(err)}\n${name}: ${JSON.stringify(m.events)} ${m.stderr.join('\n')}\nada: ${JSON.stringify(ada.events)} ${ada.stderr.join('\n')}`);
        });
      }
      await waitStatus(host, serving(name, true), `${name} (${attack}) planned in`);
      const warningsBefore = host.events.filter((e) => e.event === 'warning').length;
      const got = await streamCompletion(url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, undefined, { stallMs: 90_000 });
      await waitEvent(m, (e) => e.event === 'attacked', `${name} to attack`, 30_000);
      const context = `attack ${attack}: ${JSON.stringify({ status: got.status, error: got.error, text: got.text })}\nhost: ${JSON.stringify(host.events.filter((e) => e.event !== 'status' && e.event !== 'weights-progress').slice(-30))}\n${host.stderr.join('\n')}`;
      if (attack === 'nan') {
        // The member's fault, not the client's: 502 with a clear code; reported as a precision problem, not planned out.
        expect(got.error?.code, context).toBe('ring_member_numeric');
        await waitEvent(host, (e) => e.event === 'warning' && e.code === 'RING_PEER_NUMERIC' && host.events.indexOf(e) >= warningsBefore, 'the precision warning');
        expect((await hostStatus(host)).stages.map((s) => s.name), context).toContain(name);
        m.child.kill('SIGKILL');
      } else {
        // The request either failed with the member's fault (its step was corrupted) or was recomputed on the next ring.
        if (got.error !== undefined) expect(got.error.code, context).toBe('ring_member_malformed');
        else expect(got.text, context).toBe(want);
        await waitEvent(host, (e) => e.event === 'warning' && e.code === 'RING_PEER_MALFORMED' && e.member === name, `the host to name ${name}`);
      }
      await waitStatus(host, serving(name, false), `the ring re-planned without ${name} (${attack})`);
      expect(alive(host), context).toBe(true);
      expect(alive(ada), `ada died on ${attack}: ${ada.stderr.join('\n')}`).toBe(true);
      const after = await streamCompletion(url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, undefined, { stallMs: 90_000 });
      expect(after.error, `after ${attack}: ${JSON.stringify(after.error)}`).toBeUndefined();
      expect(after.text, `after ${attack}`).toBe(want);
    }
    expect(host.stderr.join('\n')).not.toMatch(/Unhandled|uncaught|abort\(/i);
    expect(ada.stderr.join('\n')).not.toMatch(/Unhandled|uncaught|abort\(/i);
  }, 900_000);
});
