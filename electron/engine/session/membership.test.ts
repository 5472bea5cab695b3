import { describe, expect, it } from 'vitest';
import { activeMembers, apply, initialMembership, resolveMember, type MembershipChange, type MembershipConfig, type MembershipEvent, type MemberState } from './membership.js';

const join = (memberId: string, at: number, peer = 1, name = `name-${memberId}`, fingerprint = `fp${memberId.padEnd(2, '0').slice(0, 2)}-0000`): MembershipEvent =>
  ({ type: 'join-requested', memberId, name, fingerprint, peer, addresses: ['ws://127.0.0.1:1'], at });

function run(events: MembershipEvent[], config: Partial<MembershipConfig> = { softEvictMs: 15_000, hardEvictMs: 120_000, autoApprove: true }) {
  let state = initialMembership(config);
  const changes: MembershipChange[] = [];
  for (const e of events) {
    const t = apply(e, state);
    state = t.state;
    changes.push(...t.changes);
  }
  return { state, changes: changes.map((c) => `${c.type}${'reason' in c ? `:${c.reason}` : ''}${'rejoined' in c && c.rejoined ? ':rejoined' : ''} ${c.memberId}`) };
}

const stateOf = (events: MembershipEvent[], id: string, config?: Partial<MembershipConfig>): MemberState | undefined => run(events, config).state.members.get(id)?.state;

describe('membership reducer', () => {
  const manual = { softEvictMs: 15_000, hardEvictMs: 120_000, autoApprove: false };

  it.each<[string, MembershipEvent[], Partial<MembershipConfig> | undefined, MemberState | undefined, string[]]>([
    ['auto-approve admits at once', [join('a', 0)], undefined, 'active', ['member-joined a']],
    ['without auto-approve a joiner waits', [join('a', 0)], manual, 'pending', ['member-pending a']],
    ['the host approves a pending member', [join('a', 0), { type: 'approved', memberId: 'a', at: 1 }], manual, 'active', ['member-pending a', 'member-joined a']],
    ['the host rejects a pending member', [join('a', 0), { type: 'rejected', memberId: 'a', at: 1 }], manual, 'rejected', ['member-pending a', 'member-rejected a']],
    ['a rejected member stays rejected when it asks again', [join('a', 0), { type: 'rejected', memberId: 'a', at: 1 }, join('a', 2)], manual, 'rejected', ['member-pending a', 'member-rejected a', 'member-rejected a']],
    ['approving twice changes nothing', [join('a', 0), { type: 'approved', memberId: 'a', at: 1 }, { type: 'approved', memberId: 'a', at: 2 }], manual, 'active', ['member-pending a', 'member-joined a']],
    ['heartbeats keep a member active', [join('a', 0), { type: 'heartbeat', memberId: 'a', at: 10_000 }, { type: 'tick', at: 24_000 }], undefined, 'active', ['member-joined a']],
    ['silence past the soft timeout soft-evicts', [join('a', 0), { type: 'tick', at: 15_000 }], undefined, 'soft-evicted', ['member-joined a', 'member-left:soft-evicted a']],
    ['silence just under the soft timeout does not', [join('a', 0), { type: 'tick', at: 14_999 }], undefined, 'active', ['member-joined a']],
    ['silence past the hard timeout hard-evicts', [join('a', 0), { type: 'tick', at: 15_000 }, { type: 'tick', at: 120_000 }], undefined, 'evicted', ['member-joined a', 'member-left:soft-evicted a', 'member-left:hard-evicted a']],
    ['one late tick does both evictions in order', [join('a', 0), { type: 'tick', at: 500_000 }], undefined, 'evicted', ['member-joined a', 'member-left:soft-evicted a', 'member-left:hard-evicted a']],
    ['a heartbeat after soft eviction recovers the member', [join('a', 0), { type: 'tick', at: 16_000 }, { type: 'heartbeat', memberId: 'a', at: 17_000 }], undefined, 'active', ['member-joined a', 'member-left:soft-evicted a', 'member-recovered a']],
    ['a heartbeat after hard eviction is ignored', [join('a', 0), { type: 'tick', at: 200_000 }, { type: 'heartbeat', memberId: 'a', at: 200_001 }], undefined, 'evicted', ['member-joined a', 'member-left:soft-evicted a', 'member-left:hard-evicted a']],
    ['an evicted member rejoins with its identity, without approval', [join('a', 0), { type: 'approved', memberId: 'a', at: 0 }, { type: 'tick', at: 200_000 }, join('a', 200_001, 7)], manual, 'active', ['member-pending a', 'member-joined a', 'member-left:soft-evicted a', 'member-left:hard-evicted a', 'member-joined:rejoined a']],
    ['a dropped socket alone evicts nobody', [join('a', 0), { type: 'disconnected', memberId: 'a', at: 1 }], undefined, 'active', ['member-joined a']],
    ['a reconnect within the soft timeout keeps the member active', [join('a', 0), { type: 'disconnected', memberId: 'a', at: 1_000 }, join('a', 5_000, 4), { type: 'tick', at: 19_000 }], undefined, 'active', ['member-joined a', 'member-joined:rejoined a']],
    ['leaving is reported as left', [join('a', 0), { type: 'left', memberId: 'a', at: 3 }], undefined, 'left', ['member-joined a', 'member-left:left a']],
    ['a member that left can rejoin', [join('a', 0), { type: 'left', memberId: 'a', at: 3 }, join('a', 4)], undefined, 'active', ['member-joined a', 'member-left:left a', 'member-joined:rejoined a']],
    ['a pending member never approved is dropped after the hard timeout', [join('a', 0), { type: 'tick', at: 120_000 }], manual, 'evicted', ['member-pending a']],
    ['events for unknown members change nothing', [{ type: 'heartbeat', memberId: 'x', at: 0 }, { type: 'left', memberId: 'x', at: 0 }, { type: 'approved', memberId: 'x', at: 0 }], undefined, undefined, []],
  ])('%s', (_name, events, config, expectedState, expectedChanges) => {
    const r = run(events, config);
    expect(r.state.members.get('a')?.state).toBe(expectedState);
    expect(r.changes).toEqual(expectedChanges);
  });

  it('uses configurable timeouts', () => {
    const cfg = { softEvictMs: 100, hardEvictMs: 300, autoApprove: true };
    expect(stateOf([join('a', 0), { type: 'tick', at: 100 }], 'a', cfg)).toBe('soft-evicted');
    expect(stateOf([join('a', 0), { type: 'tick', at: 300 }], 'a', cfg)).toBe('evicted');
  });

  it('refuses a hard timeout that is not longer than the soft one', () => {
    expect(() => initialMembership({ softEvictMs: 100, hardEvictMs: 100 })).toThrow(/soft/);
  });

  it('stores the capability report and the new peer number on rejoin', () => {
    const r = run([join('a', 0, 3), { type: 'capabilities-reported', memberId: 'a', capabilities: { ramBytes: 8e9 }, at: 1 }, join('a', 2, 9)]);
    const m = r.state.members.get('a');
    expect(m?.capabilities).toEqual({ ramBytes: 8e9 });
    expect(m?.peer).toBe(9);
  });

  it('lists only active members for the ring', () => {
    const r = run([join('a', 0), join('b', 10_000, 2), { type: 'tick', at: 16_000 }]);
    expect(activeMembers(r.state).map((m) => m.memberId)).toEqual(['b']);
  });

  it('does not modify the state it was given', () => {
    const s0 = initialMembership({ autoApprove: true });
    const s1 = apply(join('a', 0), s0).state;
    apply({ type: 'tick', at: 1e9 }, s1);
    expect(s0.members.size).toBe(0);
    expect(s1.members.get('a')?.state).toBe('active');
  });

  describe('naming the member a decision is for (an impostor may take any name)', () => {
    const manual = { softEvictMs: 15_000, hardEvictMs: 120_000, autoApprove: false };
    const friend = join('friend-key-1', 0, 1, 'ada', 'abcd-efgh');
    const impostor = join('impostor-key', 1, 2, 'ada', 'wxyz-1234');
    const state = (events: MembershipEvent[]) => run(events, manual).state;
    it.each([
      ['a unique pending name', [friend], 'ada', 'friend-key-1'],
      ['a fingerprint', [friend, impostor], 'abcd-efgh', 'friend-key-1'],
      ['a fingerprint typed without the hyphen, in capitals', [friend, impostor], 'WXYZ1234', 'impostor-key'],
      ['a member id', [friend, impostor], 'friend-key-1', 'friend-key-1'],
    ])('resolves %s', (_what, events, who, expected) => {
      expect(resolveMember(state(events), who).memberId).toBe(expected);
    });

    it('refuses a name two pending members share, listing both fingerprints', () => {
      const err = (() => {
        try {
          resolveMember(state([friend, impostor]), 'ada');
        } catch (e) {
          return e as { code: string; message: string };
        }
        return undefined;
      })();
      expect(err?.code).toBe('MEMBER_AMBIGUOUS');
      expect(err?.message).toContain('abcd-efgh');
      expect(err?.message).toContain('wxyz-1234');
    });

    it('refuses a name an active member already has, so a newcomer cannot ride on it', () => {
      const s = state([friend, { type: 'approved', memberId: 'friend-key-1', at: 1 }, impostor]);
      expect(() => resolveMember(s, 'ada')).toThrow(expect.objectContaining({ code: 'MEMBER_AMBIGUOUS' }));
      expect(resolveMember(s, 'wxyz-1234').memberId).toBe('impostor-key');
    });

    it('says who is waiting when nobody matches', () => {
      expect(() => resolveMember(state([friend]), 'bob')).toThrow(expect.objectContaining({ code: 'MEMBER_NOT_FOUND', message: expect.stringContaining('abcd-efgh') }));
    });
  });
});
