import { describe, expect, it } from 'vitest';
import type { MemberRecord } from './membership.js';
import { pairKey, ringPairs, ringPeers, RingLinkTable } from './ring-links.js';

const member = (memberId: string, peer: number, joinedAtMs: number): MemberRecord => ({
  memberId, name: memberId, fingerprint: 'aaaa-bbbb', peer, state: 'active', approved: true, connected: true,
  addresses: [], capabilities: undefined, joinedAtMs, lastSeenMs: joinedAtMs,
});
const ada = member('ada', 3, 10);
const bob = member('bob', 5, 20);
const cyd = member('cyd', 4, 20);

describe('the ring\'s order', () => {
  it.each([
    ['the host alone', [], undefined, [0]],
    ['every active member in join order before a plan (ties by id)', [cyd, bob, ada], undefined, [0, 3, 5, 4]],
    ['the planned order', [ada, bob, cyd], ['cyd', 'ada', 'bob'], [0, 4, 3, 5]],
    ['members the plan left out stay out', [ada, bob, cyd], ['bob'], [0, 5]],
  ] as const)('%s', (_what, active, order, expected) => {
    expect(ringPeers(active, order)).toEqual(expected);
  });

  it.each([
    ['no pairs for a ring of one', [0], []],
    ['one pair for two (each way is the same pair)', [0, 3], ['0-3']],
    ['a closed loop of three', [0, 5, 3], ['0-5', '3-5', '0-3']],
  ] as const)('%s', (_what, ring, expected) => {
    expect([...ringPairs(ring)]).toEqual(expected);
  });

  it('names a pair the same either way round', () => {
    expect(pairKey(5, 3)).toBe(pairKey(3, 5));
  });
});

describe('the ring\'s link table', () => {
  it('adds the new pairs (the earlier peer dials) and drops those the ring lost', () => {
    const t = new RingLinkTable();
    expect(t.update([0, 3, 5])).toEqual({ added: [[0, 3], [3, 5], [0, 5]], removed: [] });
    expect(t.update([0, 3, 5])).toEqual({ added: [], removed: [] });
    expect(t.update([0, 5])).toEqual({ added: [], removed: [[0, 3], [3, 5]] });
    expect(t.isPair(5, 0)).toBe(true);
    expect(t.isPair(3, 5)).toBe(false);
    expect(t.views()).toEqual([{ a: 0, b: 5, state: 'connecting', kind: undefined, rttMs: undefined }]);
  });

  it('announces a link when its state or kind changes or its first RTT arrives, not for every report', () => {
    const t = new RingLinkTable();
    t.update([0, 3]);
    expect(t.report(3, { peer: 0, state: 'up', kind: 'direct', transport: 'tcp', rttMs: undefined })).toMatchObject({ a: 0, b: 3, state: 'up', kind: 'direct', transport: 'tcp' });
    expect(t.report(0, { peer: 3, state: 'up', kind: 'direct', rttMs: 2, throughputMBps: 50 })).toMatchObject({ rttMs: 2, throughputMBps: 50, transport: 'tcp' });
    expect(t.report(3, { peer: 0, state: 'up', kind: undefined, rttMs: 3 })).toBeUndefined();
    expect(t.views()).toEqual([{ a: 0, b: 3, state: 'up', kind: 'direct', transport: 'tcp', rttMs: 3, throughputMBps: 50 }]);
    // Down: the kind and last RTT stay for display.
    expect(t.report(0, { peer: 3, state: 'failed', kind: undefined, rttMs: undefined, error: 'gone' })).toMatchObject({ state: 'failed', kind: 'direct', rttMs: 3 });
    // ...but it no longer runs over a transport.
    expect(t.views()[0]).not.toHaveProperty('transport');
  });

  it('ignores reports of links that are not ring pairs', () => {
    const t = new RingLinkTable();
    t.update([0, 3]);
    expect(t.report(3, { peer: 5, state: 'up', kind: 'direct', rttMs: 1 })).toBeUndefined();
    expect(t.views()).toHaveLength(1);
  });

  it('forgets the pairs whose link is down, so the next update keys them afresh', () => {
    const t = new RingLinkTable();
    t.update([0, 3, 5]);
    t.report(3, { peer: 5, state: 'closed', kind: undefined, rttMs: undefined });
    t.forgetDown();
    expect(t.update([0, 3, 5])).toEqual({ added: [[3, 5]], removed: [] });
  });
});
