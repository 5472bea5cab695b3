import { describe, expect, it } from 'vitest';
import { inferFiltering, type PunchOutcome } from './nat-filtering.js';
import type { NatFiltering, NatMapping } from './nat-reach.js';

const SYM = 'address-dependent' as const;
const CONE = 'endpoint-independent' as const;

describe('NAT filtering from punch outcomes', () => {
  it.each<[string, NatMapping | undefined, PunchOutcome[], NatFiltering | undefined]>([
    ['nothing tried yet', CONE, [], undefined],
    ['punches with cones tell nothing (they succeed through any filter)', CONE, [{ peerMapping: CONE, succeeded: true }, { peerMapping: CONE, succeeded: false }], undefined],
    ['a punch with a peer of unmeasured mapping tells nothing', CONE, [{ peerMapping: undefined, succeeded: true }], undefined],
    ['a punch with a symmetric peer that opened: lenient', CONE, [{ peerMapping: SYM, succeeded: true }], 'lenient'],
    ['a punch with a symmetric peer that failed: port-dependent', CONE, [{ peerMapping: SYM, succeeded: false }], 'port-dependent'],
    ['one success outweighs failures (a failure may be a lost race)', CONE, [{ peerMapping: SYM, succeeded: false }, { peerMapping: SYM, succeeded: true }, { peerMapping: SYM, succeeded: false }], 'lenient'],
    ["a symmetric member's own filter is not what decides its punches", SYM, [{ peerMapping: SYM, succeeded: false }], undefined],
    ['an unmeasured mapping infers nothing', undefined, [{ peerMapping: SYM, succeeded: false }], undefined],
  ])('%s', (_what, mapping, outcomes, expected) => {
    expect(inferFiltering(mapping, outcomes)).toBe(expected);
  });
});
