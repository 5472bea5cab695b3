// Hijacks and lockouts, with a real host, members and rendezvous on loopback: a rendezvous that
// enforces nothing (as one run by an attacker would) cannot search the code space through the
// host; a process without a member's key cannot take its place; a name shared by an impostor
// cannot steal a friend's approval; an approved member rejoins after the code stopped working.
import { afterEach, describe, expect, it } from 'vitest';
import { isKiwiError, type KiwiError } from '../errors.js';
import { startRendezvous, type Rendezvous } from '../rendezvous/server.js';
import { createHost, type HostSession } from './host.js';
import { generateIdentity } from './identity.js';
import { joinSession, MemberSession } from './member.js';
import { RendezvousClient } from './rendezvous-client.js';
import { codePassword, parseSessionCode } from './session-code.js';
import { passwordScalar } from './spake2.js';
import { wrongCodeGuess } from '../test-support/wrong-code-guess.js';

/** A rendezvous whose limits are off: what an operator who wants to guess codes would run. */
const LAX = { maxFailedAttempts: 100_000, maxFailedAttemptsTotal: 100_000, maxPendingPerSource: 100_000, maxConnectionsPerIp: 100_000, messagesPerSecond: 1e6, messageBurst: 1e6 };

describe('hijacks and lockouts (in-process, loopback)', () => {
  let host: HostSession | undefined;
  let rv: Rendezvous | undefined;
  const members: MemberSession[] = [];
  afterEach(async () => {
    for (const m of members.splice(0)) await m.stop('test over');
    await host?.close();
    host = undefined;
    await rv?.close();
    rv = undefined;
  });


  it('answers at most maxPakeFailures wrong codes per session through a rendezvous that enforces nothing, then says so; approved members still rejoin', async () => {
    rv = await startRendezvous({ limits: LAX });
    host = await createHost({ rendezvousUrl: rv.url, autoApprove: true, maxPakeFailures: 5 });
    const locked: KiwiError[] = [];
    host.on('pake-locked', (err) => locked.push(err));
    const friend = await joinSession({ code: host.code, rendezvousUrl: rv.url, name: 'ada', reconnectDelayMs: 50 });
    members.push(friend);
    const code = parseSessionCode(host.code);
    const wrongW = passwordScalar(codePassword({ ...code, words: [code.words[0] === 'apple' ? 'lemon' : 'apple', ...code.words.slice(1)] }), String(code.nameplate));
    const outcomes: string[] = [];
    for (let i = 0; i < 20; i++) outcomes.push(await wrongCodeGuess(rv.url, host.nameplate, wrongW));
    expect(outcomes.filter((o) => o === 'answered')).toHaveLength(5);
    expect(outcomes.slice(5)).toEqual(Array(15).fill('refused'));
    expect(locked.map((e) => e.code)).toEqual(['PAKE_LOCKED']);
    expect(locked[0]?.message).toMatch(/new session for a new code/);
    // Even the right code gets no answer now: the operator cannot sit in the middle of a new join.
    await expect(joinSession({ code: host.code, rendezvousUrl: rv.url, name: 'late', reconnect: false })).rejects.toMatchObject({ code: 'PAKE_CONFIRMATION_FAILED' });
    // The friend, approved before, comes back after a dropped connection with its resume secret.
    const rejoined = new Promise<boolean>((resolve) => friend.on('joined', (j) => j.rejoin && resolve(true)));
    expect(rv.core.dropPeer(host.nameplate, friend.peer as number)).toBe(true);
    expect(await rejoined).toBe(true);
    expect(host.status().members.find((m) => m.memberId === friend.memberId)).toMatchObject({ state: 'active', connected: true, peer: friend.peer });
  });

  it('refuses a hello that claims an approved memberId without its key, and the member keeps its place', async () => {
    host = await createHost({ autoApprove: true });
    const warnings: string[] = [];
    host.on('warning', (err) => warnings.push(err.code));
    const friend = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada' });
    members.push(friend);
    const replaced = new Promise<string>((resolve) => friend.once('fatal', (err) => resolve(err.code)));
    const other = generateIdentity();
    const forgeries = [
      // The friend's id and public key (both are in events, status and the UI), signed with another key.
      { memberId: friend.memberId, publicKey: friend.identity.publicKey, secretKey: other.secretKey },
      // The friend's id with the attacker's own key.
      { memberId: friend.memberId, publicKey: other.publicKey, secretKey: other.secretKey },
    ];
    for (const identity of forgeries) {
      const err = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada', identity, reconnect: false, timeoutMs: 5000 })
        .then(() => undefined, (e: unknown) => e);
      expect(isKiwiError(err)).toBe(true);
    }
    expect(warnings.filter((c) => c === 'IDENTITY_INVALID')).toHaveLength(2);
    const status = host.status();
    expect(status.members).toHaveLength(1);
    expect(status.members[0]).toMatchObject({ memberId: friend.memberId, peer: friend.peer, connected: true, state: 'active' });
    // The friend was never pushed out: its control link still carries a round trip.
    const pong = new Promise<Record<string, unknown>>((resolve) => host?.once('pipeline', (_id, body) => resolve(body)));
    friend.send({ type: 'pipeline', body: { ping: 1 } });
    expect(await pong).toEqual({ ping: 1 });
    expect(await Promise.race([replaced, Promise.resolve('not replaced')])).toBe('not replaced');
  });

  it('lets the real key rejoin in place of its older connection (the replaced flow needs the proof)', async () => {
    host = await createHost({ autoApprove: true });
    const first = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'kim', reconnect: false });
    members.push(first);
    const fatal = new Promise<string>((resolve) => first.once('fatal', (err) => resolve(err.code)));
    const second = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'kim', identity: first.identity });
    members.push(second);
    expect(await fatal).toBe('SESSION_REPLACED');
    expect(host.status().members).toHaveLength(1);
  });

  it('shows the same fingerprint on both screens and refuses to approve a name an impostor shares', async () => {
    host = await createHost({ autoApprove: false });
    const h = host;
    const pending: Array<{ memberId: string; fingerprint: string }> = [];
    h.on('change', (c) => c.type === 'member-pending' && pending.push({ memberId: c.memberId, fingerprint: c.fingerprint }));
    const friend = new MemberSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada' });
    const impostor = new MemberSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada' });
    members.push(friend, impostor);
    const friendJoined = new Promise<string>((resolve) => friend.once('joined', (j) => resolve(j.fingerprint)));
    const approved = new Promise<void>((resolve) => friend.once('approved', resolve));
    let impostorApproved = false;
    impostor.once('approved', () => (impostorApproved = true));
    await friend.connect();
    await impostor.connect();
    const friendFp = await friendJoined;
    expect(friendFp).toMatch(/^[0-9a-z]{4}-[0-9a-z]{4}$/);
    expect(pending.find((p) => p.memberId === friend.memberId)?.fingerprint).toBe(friendFp);
    expect(h.status().members.find((m) => m.memberId === friend.memberId)?.fingerprint).toBe(friendFp);
    const err = (() => {
      try {
        h.findMember('ada');
      } catch (e) {
        return e as KiwiError;
      }
      return undefined;
    })();
    expect(err?.code).toBe('MEMBER_AMBIGUOUS');
    expect(err?.message).toContain(friendFp);
    expect(err?.message).toContain(impostor.fingerprint as string);
    h.decide(h.findMember(friendFp.toUpperCase()).memberId, true);
    await approved;
    expect(impostorApproved).toBe(false);
    const states = Object.fromEntries(h.status().members.map((m) => [m.memberId, m.state]));
    expect(states).toEqual({ [friend.memberId]: 'active', [impostor.memberId]: 'pending' });
  });

  it('shows a hostile member\'s name without its terminal escapes, in events, status and rosters', async () => {
    host = await createHost({ autoApprove: true });
    const names: string[] = [];
    host.on('change', (c) => names.push(c.name));
    const friend = await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'ada' });
    members.push(friend);
    const hostile = new MemberSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name: 'placeholder' });
    members.push(hostile);
    // What a modified client sends: the name as raw bytes, past the checks of an honest one.
    (hostile as unknown as { name: string }).name = '\u001b[2J\u001b]0;owned\u0007mallory\u202e\r\nada joined';
    const roster = new Promise<string[]>((resolve) => friend.on('roster', (r) => r.length === 2 && resolve(r.map((m) => m.name))));
    await hostile.connect();
    expect(names).toEqual(['ada', 'mallory ada joined']);
    expect(host.status().members.map((m) => m.name)).toEqual(['ada', 'mallory ada joined']);
    expect(await roster).toEqual(['ada', 'mallory ada joined']);
  });

  it('lets code-less connections and a few wrong guesses from one address burn nothing: the friends still join', async () => {
    host = await createHost({ autoApprove: true });
    const code = parseSessionCode(host.code);
    const wrongW = passwordScalar(codePassword({ ...code, words: [code.words[0] === 'apple' ? 'lemon' : 'apple', ...code.words.slice(1)] }), String(code.nameplate));
    for (let i = 0; i < 30; i++) {
      const c = await RendezvousClient.connect(host.rendezvousUrl);
      const closed = new Promise<void>((resolve) => c.once('close', () => resolve()));
      await c.claim(host.nameplate);
      c.close();
      await closed;
    }
    for (let i = 0; i < 4; i++) expect(await wrongCodeGuess(host.rendezvousUrl, host.nameplate, wrongW)).toBe('answered');
    for (const name of ['ada', 'bob']) members.push(await joinSession({ code: host.code, rendezvousUrl: host.rendezvousUrl, name }));
    expect(host.status().members.map((m) => m.state)).toEqual(['active', 'active']);
  });
});
