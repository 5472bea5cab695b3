// How a member tells the host about its ring links, both directions of the translation: a link's
// status becomes a 'link-status' (up, with its first RTT) or 'link-down' control message, and the
// host reads those back as a status of the reporting member's link.
import type { RingLinkStatus } from './link-manager.js';
import type { MemberToHost } from './session-messages.js';

/** The longest reason a link-down carries (the message's limit). */
const MAX_REASON_CHARS = 200;

export type LinkReport = Extract<MemberToHost, { type: 'link-status' | 'link-down' }>;

/** What a member reports of a link's new status; undefined: nothing to report yet (connecting, or up without an RTT). */
export function linkReport(s: RingLinkStatus): LinkReport | undefined {
  if (s.state === 'up' && s.kind !== undefined && s.rttMs !== undefined) {
    return {
      type: 'link-status', peer: s.peer, kind: s.kind, rttMs: s.rttMs,
      ...(s.transport !== undefined ? { transport: s.transport } : {}), ...(s.throughputMBps !== undefined ? { throughputMBps: s.throughputMBps } : {}),
    };
  }
  if (s.state === 'closed' || s.state === 'failed') return { type: 'link-down', peer: s.peer, state: s.state, reason: (s.error ?? s.state).slice(0, MAX_REASON_CHARS) };
  return undefined;
}

/** The status a member's report gives its link to `msg.peer`. */
export function reportedStatus(msg: LinkReport): RingLinkStatus {
  if (msg.type === 'link-down') return { peer: msg.peer, state: msg.state, kind: undefined, rttMs: undefined, error: msg.reason };
  return {
    peer: msg.peer, state: 'up', kind: msg.kind, rttMs: msg.rttMs,
    ...(msg.transport !== undefined ? { transport: msg.transport } : {}), ...(msg.throughputMBps !== undefined ? { throughputMBps: msg.throughputMBps } : {}),
  };
}
