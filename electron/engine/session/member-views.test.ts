import { describe, expect, it } from 'vitest';
import type { MemberRecord, MemberState } from './membership.js';
import { memberView, rosterOf } from './member-views.js';

const member = (memberId: string, peer: number, state: MemberState, connected = true): MemberRecord => ({
  memberId, name: `${memberId} name`, fingerprint: 'abcd-efgh', peer, state, approved: state !== 'pending', connected,
  addresses: ['ws://10.0.0.2:7000'], capabilities: { vram_mb: 1 }, joinedAtMs: 1, lastSeenMs: 2,
});

describe('what the host shows of its members', () => {
  it('views a member without its approval flag or join time', () => {
    expect(memberView(member('ada', 3, 'active'))).toEqual({
      memberId: 'ada', name: 'ada name', fingerprint: 'abcd-efgh', peer: 3, state: 'active', connected: true,
      addresses: ['ws://10.0.0.2:7000'], lastSeenMs: 2, capabilities: { vram_mb: 1 },
    });
  });

  it('lists everyone but refused members in the roster, marking the active members of the ring', () => {
    const members = [member('ada', 3, 'active'), member('bob', 4, 'pending'), member('cyd', 5, 'rejected'), member('dan', 6, 'active', false), member('eve', 7, 'soft-evicted')];
    expect(rosterOf(members, [0, 3, 4, 7])).toEqual([
      { peer: 3, name: 'ada name', state: 'active', connected: true, inRing: true },
      { peer: 4, name: 'bob name', state: 'pending', connected: true, inRing: false },
      { peer: 6, name: 'dan name', state: 'active', connected: false, inRing: false },
      { peer: 7, name: 'eve name', state: 'soft-evicted', connected: true, inRing: false },
    ]);
  });

  it('keeps the roster to the latest 1024 members', () => {
    const members = Array.from({ length: 1100 }, (_, i) => member(`m${i}`, i + 1, 'active'));
    const roster = rosterOf(members, [0]);
    expect(roster).toHaveLength(1024);
    expect(roster[0]?.peer).toBe(77);
  });
});
