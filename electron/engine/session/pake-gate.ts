// The host's door: one key exchange per rendezvous peer that claimed the nameplate, answered with
// the code (or, for a rejoin, the resume secret of the member it resumes) and admitted once the
// claimant's confirmation proves it. Every answered exchange that did not prove the code counts as
// a guess; after maxFailures the code stops working for new members (approved ones still rejoin),
// since a rendezvous run by somebody else could otherwise search the code space through the host.
import { isKiwiError, KiwiError } from '../errors.js';
import { fromB64, PakeBody, parseBody, toB64 } from './session-messages.js';
import { startSessionPake } from './session-params.js';
import type { Spake2Pending, Spake2Result } from './spake2.js';

/** What the gate does to the world: the host wires these to its rendezvous client and events. */
export interface PakeGateIo {
  /** Sends a key exchange body to the claimant (through the rendezvous). */
  reply: (peer: number, body: Record<string, unknown>) => void;
  /** The claimant proved the code (or its resume secret); memberId: the member a rejoin resumes. */
  admit: (peer: number, result: Spake2Result, memberId: string | undefined) => void;
  /** Tells the rendezvous that this claimant failed (it keeps its own count). */
  reject: (peer: number) => void;
  failed: (peer: number, reason: string) => void;
  locked: (err: KiwiError) => void;
  /** The secret an approved member rejoins with; undefined: it has none. */
  resumeSecret: (memberId: string) => Uint8Array | undefined;
}

export interface PakeGateOptions {
  nameplate: number;
  /** The code's password scalar. */
  w: bigint;
  /** How long a claimant has to finish the exchange. */
  timeoutMs: number;
  maxFailures: number;
}

interface Attempt {
  peer: number;
  /** Claimed as a returning member: only a 'rejoin' exchange is accepted. */
  rejoin: boolean;
  /** The member a rejoin resumes. */
  memberId: string | undefined;
  pending: Spake2Pending | undefined;
  result: Spake2Result | undefined;
  /** The host answered with a code-derived message: the claimant could test one guess. */
  answered: boolean;
  timer: NodeJS.Timeout;
}

export class PakeGate {
  private readonly attempts = new Map<number, Attempt>();
  private failures = 0;
  private isLocked = false;

  constructor(
    private readonly opts: PakeGateOptions,
    private readonly io: PakeGateIo,
  ) {}

  /** Too many wrong codes: no more exchanges with the code. */
  get locked(): boolean {
    return this.isLocked;
  }

  /** A peer claimed the nameplate (as a returning member when `rejoin`). */
  claimed(peer: number, rejoin: boolean): void {
    const timer = setTimeout(() => this.fail(peer, 'the key exchange did not finish in time'), this.opts.timeoutMs);
    this.attempts.set(peer, { peer, rejoin, memberId: undefined, pending: undefined, result: undefined, answered: false, timer });
  }

  /** A peer left the rendezvous; an exchange it left unfinished after an answer counts as a guess. */
  left(peer: number): void {
    const attempt = this.attempts.get(peer);
    if (attempt === undefined) return;
    clearTimeout(attempt.timer);
    this.attempts.delete(peer);
    // One that never sent a key exchange message guessed nothing (the rendezvous does not count it either).
    if (attempt.pending !== undefined) this.io.failed(peer, 'left before finishing the key exchange (probably a wrong code)');
    if (attempt.answered) this.countFailure();
  }

  /** A key exchange body from `peer`; false when the peer is in no exchange (the caller warns). */
  receive(peer: number, raw: Record<string, unknown>): boolean {
    const attempt = this.attempts.get(peer);
    if (attempt === undefined) return false;
    try {
      this.step(attempt, parseBody(PakeBody, raw));
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.fail(peer, err.message);
    }
    return true;
  }

  close(): void {
    for (const a of this.attempts.values()) clearTimeout(a.timer);
  }

  private step(attempt: Attempt, body: PakeBody): void {
    const { peer } = attempt;
    if (body.kind === 'pake' && attempt.pending === undefined && !attempt.rejoin) {
      if (this.isLocked) throw new KiwiError('PAKE_LOCKED', 'The host takes no more members with this code (too many wrong codes); ask the host for a new one.');
      attempt.pending = startSessionPake('B', this.opts.nameplate, { w: this.opts.w });
      attempt.result = attempt.pending.finish(fromB64(body.msg));
      attempt.answered = true;
      this.io.reply(peer, { kind: 'pake-reply', msg: toB64(attempt.pending.message), confirm: toB64(attempt.result.confirmation) });
    } else if (body.kind === 'rejoin' && attempt.pending === undefined && attempt.rejoin) {
      const secret = this.io.resumeSecret(body.memberId);
      if (secret === undefined) throw new KiwiError('PAKE_CONFIRMATION_FAILED', `Member ${body.memberId} has no place to resume; it must join with the code.`);
      attempt.memberId = body.memberId;
      attempt.pending = startSessionPake('B', this.opts.nameplate, { resume: secret, memberId: body.memberId });
      attempt.result = attempt.pending.finish(fromB64(body.msg));
      this.io.reply(peer, { kind: 'pake-reply', msg: toB64(attempt.pending.message), confirm: toB64(attempt.result.confirmation) });
    } else if (body.kind === 'confirm' && attempt.result !== undefined) {
      attempt.result.verifyPeerConfirmation(fromB64(body.confirm));
      clearTimeout(attempt.timer);
      this.attempts.delete(peer);
      this.io.admit(peer, attempt.result, attempt.memberId);
    } else {
      throw new KiwiError('PAKE_UNEXPECTED', `Peer ${peer} sent '${body.kind}' out of order.`);
    }
  }

  private fail(peer: number, reason: string): void {
    const attempt = this.attempts.get(peer);
    if (attempt === undefined) return;
    clearTimeout(attempt.timer);
    this.attempts.delete(peer);
    this.io.reject(peer);
    this.io.failed(peer, reason);
    if (attempt.answered) this.countFailure();
  }

  /** One more guess at the code was answered and failed; past the limit, the code stops working. */
  private countFailure(): void {
    this.failures++;
    if (this.isLocked || this.failures < this.opts.maxFailures) return;
    this.isLocked = true;
    // Claimants already waiting get no answer either.
    for (const a of [...this.attempts.values()]) if (!a.rejoin && a.pending === undefined) this.fail(a.peer, 'the host takes no more key exchanges with this code');
    this.io.locked(new KiwiError('PAKE_LOCKED',
      `${this.failures} attempts with a wrong code: this session takes no more new members with its code (members already approved still rejoin). If friends still need to join, start a new session for a new code.`));
  }
}
