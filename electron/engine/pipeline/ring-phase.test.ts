import { describe, expect, it } from 'vitest';
import { KiwiError } from '../errors.js';
import { apply, INITIAL_RING_PHASE, MAX_RECOVERIES_SHOWN, type Phase, type RecoveryRecord, type RingPhaseEvent, type RingPhaseState } from './ring-phase.js';

const record = (epoch: number, reason = `r${epoch}`): RecoveryRecord => ({ epoch, reason, startedAt: 1000 * epoch, durationMs: 10, bytesMoved: 0, resumedRequests: 1 });
const unavailable = new KiwiError('RING_UNAVAILABLE', 'The members left cannot hold the model.');
const stageFailed = new KiwiError('RING_STAGE_FAILED', 'm1 could not load layers 0-4: disk full');
const noMembers = new KiwiError('SESSION_TIMEOUT', 'Timed out waiting for members to join.');

const started = (reason: string, at: number): RingPhaseEvent => ({ type: 'replan-started', reason, at });
const serve: RingPhaseEvent[] = [{ type: 'planning-started' }, { type: 'loading-started' }, { type: 'first-ring-served' }];

function run(events: RingPhaseEvent[]): RingPhaseState {
  return events.reduce((s, e) => apply(e, s), INITIAL_RING_PHASE);
}

/** What status() shows of the state: phase, the re-plan under way, the deadline, the error's code and the recorded epochs. */
function view(s: RingPhaseState): [Phase, string | undefined, number | undefined, string | undefined, number[]] {
  return [s.phase, s.recovery && `${s.recovery.reason}@${s.recovery.startedAt}`, s.waitingUntil, s.error?.code, s.recoveries.map((r) => r.epoch)];
}

describe('ring phase reducer', () => {
  it.each<[string, RingPhaseEvent[], ReturnType<typeof view>]>([
    ['a new host gathers', [], ['gathering', undefined, undefined, undefined, []]],
    ['gathered members are planned', [{ type: 'planning-started' }], ['planning', undefined, undefined, undefined, []]],
    ['assigned members load', [{ type: 'planning-started' }, { type: 'loading-started' }], ['loading', undefined, undefined, undefined, []]],
    ['the first ring serves', serve, ['serving', undefined, undefined, undefined, []]],
    ['a failed first ring fails the host with its error', [{ type: 'planning-started' }, { type: 'forming-failed', error: noMembers }], ['failed', undefined, undefined, 'SESSION_TIMEOUT', []]],
    ['a stage that fails to load records the error and leaves the phase', [{ type: 'planning-started' }, { type: 'loading-started' }, { type: 'stage-load-failed', error: stageFailed }], ['loading', undefined, undefined, 'RING_STAGE_FAILED', []]],
    ['a re-plan recovers with its reason and start', [...serve, started('m1 left', 5)], ['recovering', 'm1 left@5', undefined, undefined, []]],
    ['a completed re-plan serves again and records itself', [...serve, started('m1 left', 5), { type: 'ring-recovered', record: record(2) }], ['serving', undefined, undefined, undefined, [2]]],
    ['a recovery clears the error of a failed load', [...serve, started('m1 left', 5), { type: 'stage-load-failed', error: stageFailed }, { type: 'ring-recovered', record: record(2) }], ['serving', undefined, undefined, undefined, [2]]],
    ['members that cannot hold the model wait until the deadline', [...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 120_005 }], ['waiting', 'm1 left@5', 120_005, 'RING_UNAVAILABLE', []]],
    ['the deadline passing clears it and keeps waiting', [...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 120_005 }, { type: 'wait-timed-out' }], ['waiting', 'm1 left@5', undefined, 'RING_UNAVAILABLE', []]],
    ['a wait after the deadline has none', [...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 120_005 }, { type: 'wait-timed-out' }, { type: 'members-changed' }, { type: 'ring-unavailable', error: unavailable, until: undefined }], ['waiting', 'm1 left@5', undefined, 'RING_UNAVAILABLE', []]],
    ['a member returning during the wait recovers, the deadline still set', [...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 120_005 }, { type: 'members-changed' }], ['recovering', 'm1 left@5', 120_005, 'RING_UNAVAILABLE', []]],
    ['a ring after the wait serves and clears wait and error', [...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 120_005 }, { type: 'members-changed' }, { type: 'ring-recovered', record: record(2) }], ['serving', undefined, undefined, undefined, [2]]],
    ['a re-plan that goes round again keeps the latest reason', [...serve, started('m1 left', 5), started('m2 joined', 9)], ['recovering', 'm2 joined@9', undefined, undefined, []]],
    ['recoveries are recorded newest last', [...serve, started('a', 1), { type: 'ring-recovered', record: record(2) }, started('b', 3), { type: 'ring-recovered', record: record(3) }], ['serving', undefined, undefined, undefined, [2, 3]]],
    ['closing ends every phase', [...serve, started('m1 left', 5), { type: 'closed' }], ['closed', 'm1 left@5', undefined, undefined, []]],
    ['nothing leaves closed', [{ type: 'closed' }, ...serve, started('m1 left', 5), { type: 'ring-unavailable', error: unavailable, until: 7 }, { type: 'members-changed' }, { type: 'forming-failed', error: noMembers }], ['closed', 'm1 left@5', 7, 'SESSION_TIMEOUT', []]],
    ['closing while forming leaves closed, with the forming error', [{ type: 'planning-started' }, { type: 'closed' }, { type: 'forming-failed', error: noMembers }], ['closed', undefined, undefined, 'SESSION_TIMEOUT', []]],
  ])('%s', (_name, events, expected) => {
    expect(view(run(events))).toEqual(expected);
  });

  it(`keeps the newest ${MAX_RECOVERIES_SHOWN} recoveries`, () => {
    const events: RingPhaseEvent[] = [...serve];
    for (let epoch = 2; epoch <= MAX_RECOVERIES_SHOWN + 3; epoch++) events.push(started(`r${epoch}`, epoch), { type: 'ring-recovered', record: record(epoch) });
    const epochs = run(events).recoveries.map((r) => r.epoch);
    expect(epochs).toHaveLength(MAX_RECOVERIES_SHOWN);
    expect(epochs[0]).toBe(4); // epochs 2 and 3 dropped
    expect(epochs.at(-1)).toBe(MAX_RECOVERIES_SHOWN + 3);
  });

  it('returns a new state and leaves the old one as it was', () => {
    const serving = run(serve);
    const next = apply({ type: 'ring-recovered', record: record(2) }, apply(started('x', 1), serving));
    expect(serving.recoveries).toEqual([]);
    expect(serving.phase).toBe('serving');
    expect(next.recoveries).toEqual([record(2)]);
  });
});
