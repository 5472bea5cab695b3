import { afterEach, describe, expect, it } from 'vitest';
import type { KiwiError } from '../errors.js';
import { PakeGate } from './pake-gate.js';
import { fromB64, PakeBody, parseBody, toB64 } from './session-messages.js';
import { startSessionPake, type PakeKey } from './session-params.js';
import { passwordScalar, type Spake2Result } from './spake2.js';

const NAMEPLATE = 7;
const w = passwordScalar('apple-banana', String(NAMEPLATE));
const wrong = passwordScalar('apple-cherry', String(NAMEPLATE));

/** A gate and what it did, in order. */
function gateWith(opts: { maxFailures?: number; secrets?: Record<string, Uint8Array> } = {}) {
  const log: string[] = [];
  const replies = new Map<number, Record<string, unknown>>();
  const admitted = new Map<number, { result: Spake2Result; memberId: string | undefined }>();
  const locks: KiwiError[] = [];
  const gate = new PakeGate({ nameplate: NAMEPLATE, w, timeoutMs: 60_000, maxFailures: opts.maxFailures ?? 20 }, {
    reply: (peer, body) => {
      replies.set(peer, body);
      log.push(`reply ${peer}`);
    },
    admit: (peer, result, memberId) => {
      admitted.set(peer, { result, memberId });
      log.push(`admit ${peer}`);
    },
    reject: (peer) => log.push(`reject ${peer}`),
    failed: (peer, reason) => log.push(`failed ${peer}: ${reason}`),
    locked: (err) => locks.push(err),
    resumeSecret: (memberId) => opts.secrets?.[memberId],
  });
  gates.push(gate);
  return { gate, log, replies, admitted, locks };
}

const gates: PakeGate[] = [];
afterEach(() => {
  for (const g of gates.splice(0)) g.close();
});

/** A claimant's side of the exchange: sends its message, then (given the host's reply) its confirmation. */
function claimant(g: ReturnType<typeof gateWith>, peer: number, key: PakeKey): Spake2Result | undefined {
  const pake = startSessionPake('A', NAMEPLATE, key);
  g.gate.receive(peer, 'w' in key ? { kind: 'pake', msg: toB64(pake.message) } : { kind: 'rejoin', memberId: key.memberId, msg: toB64(pake.message) });
  const raw = g.replies.get(peer);
  if (raw === undefined) return undefined;
  const reply = parseBody(PakeBody, raw);
  if (reply.kind !== 'pake-reply') throw new Error(`unexpected ${reply.kind}`);
  const result = pake.finish(fromB64(reply.msg));
  g.gate.receive(peer, { kind: 'confirm', confirm: toB64(result.confirmation) });
  return result;
}

describe('the host\'s PAKE gate', () => {
  it('admits a claimant that proves the code, with the same session key', () => {
    const g = gateWith();
    g.gate.claimed(3, false);
    const mine = claimant(g, 3, { w });
    expect(g.log).toEqual(['reply 3', 'admit 3']);
    expect(g.admitted.get(3)?.result.sessionKey).toEqual(mine?.sessionKey);
    expect(g.admitted.get(3)?.memberId).toBeUndefined();
  });

  it('refuses a wrong code at its confirmation and counts the guess', () => {
    const g = gateWith({ maxFailures: 2 });
    g.gate.claimed(3, false);
    claimant(g, 3, { w: wrong });
    expect(g.log).toEqual(['reply 3', 'reject 3', expect.stringMatching(/^failed 3: /)]);
    expect(g.gate.locked).toBe(false);
  });

  it('stops answering with the code after maxFailures wrong guesses, and fails the claimants already waiting', () => {
    const g = gateWith({ maxFailures: 2 });
    g.gate.claimed(3, false);
    g.gate.claimed(4, false);
    g.gate.claimed(5, false);
    claimant(g, 3, { w: wrong });
    claimant(g, 4, { w: wrong });
    expect(g.gate.locked).toBe(true);
    expect(g.locks.map((e) => e.code)).toEqual(['PAKE_LOCKED']);
    expect(g.log.slice(-2)).toEqual(['reject 5', 'failed 5: the host takes no more key exchanges with this code']);
    // A newcomer gets no answer that would test another guess.
    g.gate.claimed(6, false);
    expect(claimant(g, 6, { w })).toBeUndefined();
    expect(g.log.slice(-2)).toEqual(['reject 6', expect.stringMatching(/^failed 6: The host takes no more members with this code/)]);
  });

  it('admits a rejoin with the member\'s resume secret, even once the code is locked', () => {
    const secret = new Uint8Array(32).fill(9);
    const g = gateWith({ maxFailures: 1, secrets: { memberAAAA: secret } });
    g.gate.claimed(3, false);
    claimant(g, 3, { w: wrong });
    expect(g.gate.locked).toBe(true);
    g.gate.claimed(4, true);
    claimant(g, 4, { resume: secret, memberId: 'memberAAAA' });
    expect(g.admitted.get(4)?.memberId).toBe('memberAAAA');
  });

  it('refuses a rejoin of a member without a resume secret, without counting a guess', () => {
    const g = gateWith({ maxFailures: 1 });
    g.gate.claimed(4, true);
    expect(claimant(g, 4, { resume: new Uint8Array(32), memberId: 'memberBBBB' })).toBeUndefined();
    expect(g.log).toEqual(['reject 4', 'failed 4: Member memberBBBB has no place to resume; it must join with the code.']);
    expect(g.gate.locked).toBe(false);
  });

  it.each([
    ['a join with the code from a peer that claimed as a rejoin', true, { kind: 'pake', msg: toB64(startSessionPake('A', NAMEPLATE, { w }).message) }],
    ['a confirmation before any exchange', false, { kind: 'confirm', confirm: toB64(new Uint8Array(32)) }],
  ])('refuses %s as out of order', (_what, rejoin, body) => {
    const g = gateWith();
    g.gate.claimed(3, rejoin);
    g.gate.receive(3, body);
    expect(g.log).toEqual(['reject 3', expect.stringMatching(/^failed 3: Peer 3 sent '\w+' out of order\./)]);
  });

  it('counts a claimant that left after an answer, not one that left before sending anything', () => {
    const g = gateWith({ maxFailures: 1 });
    g.gate.claimed(3, false);
    g.gate.left(3);
    expect(g.log).toEqual([]);
    expect(g.gate.locked).toBe(false);
    g.gate.claimed(4, false);
    g.gate.receive(4, { kind: 'pake', msg: toB64(startSessionPake('A', NAMEPLATE, { w: wrong }).message) });
    g.gate.left(4);
    expect(g.log).toEqual(['reply 4', 'failed 4: left before finishing the key exchange (probably a wrong code)']);
    expect(g.gate.locked).toBe(true);
  });

  it('does not take key exchange messages from a peer in no exchange', () => {
    const g = gateWith();
    expect(g.gate.receive(9, { kind: 'confirm', confirm: toB64(new Uint8Array(32)) })).toBe(false);
  });
});
