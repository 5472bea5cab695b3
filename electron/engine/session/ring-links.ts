// The host's bookkeeping of the ring: its order (the host, peer 0, first), the neighbour pairs that
// order makes (the earlier peer of a pair dials), and the state each end last reported of each
// pair's link. Pure: the host hands out keys for the pairs `update` adds and takes down its own
// links to the pairs it drops.
import { HOST_PEER } from '../rendezvous/protocol.js';
import type { RingLinkStatus } from './link-manager.js';
import type { MemberRecord } from './membership.js';

export type RingLinkEntry = { a: number; b: number } & RingLinkStatus;

/** One ring link as the host's status shows it. */
export interface RingLinkView {
  a: number;
  b: number;
  state: RingLinkStatus['state'];
  kind: RingLinkStatus['kind'];
  transport?: RingLinkStatus['transport'];
  rttMs: number | undefined;
  throughputMBps?: number;
}

/** A pair of peers, either way round. */
export const pairKey = (x: number, y: number): string => `${Math.min(x, y)}-${Math.max(x, y)}`;

const pairOf = (key: string): [number, number] => key.split('-').map(Number) as [number, number];

/**
 * The ring's peers: the host, then the active members of `order` in that order (every active
 * member when there is no order yet), ties by join time and then id.
 */
export function ringPeers(active: readonly MemberRecord[], order: readonly string[] | undefined): number[] {
  const rank = (id: string): number => order?.indexOf(id) ?? 0;
  const members = active
    .filter((m) => order === undefined || order.includes(m.memberId))
    .sort((a, b) => rank(a.memberId) - rank(b.memberId) || a.joinedAtMs - b.joinedAtMs || a.memberId.localeCompare(b.memberId));
  return [HOST_PEER, ...members.map((m) => m.peer)];
}

/** The neighbour pairs of a ring (each once; none for a ring of one). */
export function ringPairs(ring: readonly number[]): Set<string> {
  const pairs = new Set<string>();
  if (ring.length < 2) return pairs;
  for (let i = 0; i < ring.length; i++) {
    const a = ring[i] as number;
    const b = ring[(i + 1) % ring.length] as number;
    if (a !== b) pairs.add(pairKey(a, b));
  }
  return pairs;
}

export class RingLinkTable {
  private readonly entries = new Map<string, RingLinkEntry>();
  private pairs = new Set<string>();

  /** Forgets the pairs whose link is down, so that the next update gives them fresh keys. */
  forgetDown(): void {
    for (const [key, l] of this.entries) {
      if (l.state !== 'closed' && l.state !== 'failed') continue;
      this.pairs.delete(key);
      this.entries.delete(key);
    }
  }

  /** Makes the pairs of `ring` the ring's links: returns those that are new ([a, b], a < b, a dials) and those dropped. */
  update(ring: readonly number[]): { added: Array<[number, number]>; removed: Array<[number, number]> } {
    const pairs = ringPairs(ring);
    const added: Array<[number, number]> = [];
    const removed: Array<[number, number]> = [];
    for (const key of pairs) {
      if (this.pairs.has(key)) continue;
      const [a, b] = pairOf(key);
      this.entries.set(key, { a, b, peer: b, state: 'connecting', kind: undefined, rttMs: undefined });
      added.push([a, b]);
    }
    for (const key of this.pairs) {
      if (pairs.has(key)) continue;
      this.entries.delete(key);
      removed.push(pairOf(key));
    }
    this.pairs = pairs;
    return { added, removed };
  }

  /** Whether x and y are ring neighbours now. */
  isPair(x: number, y: number): boolean {
    return this.pairs.has(pairKey(x, y));
  }

  /**
   * Merges what one end (`reporter`) says of its link to `s.peer`; returns the link when that is
   * news (its state or kind changed, or its first RTT arrived): both ends report each link.
   */
  report(reporter: number, s: RingLinkStatus): RingLinkEntry | undefined {
    const key = pairKey(reporter, s.peer);
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    const throughputMBps = s.throughputMBps ?? entry.throughputMBps;
    const transport = s.transport ?? (s.state === 'up' ? entry.transport : undefined);
    const { transport: _was, ...rest } = entry; // a link that went down no longer runs over anything
    const next: RingLinkEntry = {
      ...rest, state: s.state, kind: s.kind ?? entry.kind, rttMs: s.rttMs ?? entry.rttMs,
      ...(transport !== undefined ? { transport } : {}), ...(throughputMBps !== undefined ? { throughputMBps } : {}),
    };
    this.entries.set(key, next);
    const news = next.state !== entry.state || next.kind !== entry.kind || (entry.rttMs === undefined && next.rttMs !== undefined);
    return news ? next : undefined;
  }

  views(): RingLinkView[] {
    return [...this.entries.values()].map((l) => ({
      a: l.a, b: l.b, state: l.state, kind: l.kind, ...(l.transport !== undefined ? { transport: l.transport } : {}), rttMs: l.rttMs,
      ...(l.throughputMBps !== undefined ? { throughputMBps: l.throughputMBps } : {}),
    }));
  }
}
