import { describe, expect, it } from 'vitest';
import type { RingLinkStatus } from './link-manager.js';
import { linkReport, reportedStatus } from './link-reports.js';
import { decodeControl, encodeControl, MemberToHost } from './session-messages.js';

describe('link reports between member and host', () => {
  it.each<[string, RingLinkStatus, RingLinkStatus]>([
    ['an up link with its RTT', { peer: 2, state: 'up', kind: 'direct', rttMs: 1.5 }, { peer: 2, state: 'up', kind: 'direct', rttMs: 1.5 }],
    ['an up link with transport and throughput', { peer: 3, state: 'up', kind: 'direct', transport: 'udp', rttMs: 4, throughputMBps: 90 },
      { peer: 3, state: 'up', kind: 'direct', transport: 'udp', rttMs: 4, throughputMBps: 90 }],
    ['a failed link with its error', { peer: 0, state: 'failed', kind: 'relayed', rttMs: 3, error: 'handshake timed out' },
      { peer: 0, state: 'failed', kind: undefined, rttMs: undefined, error: 'handshake timed out' }],
    ['a closed link without an error', { peer: 1, state: 'closed', kind: undefined, rttMs: undefined }, { peer: 1, state: 'closed', kind: undefined, rttMs: undefined, error: 'closed' }],
  ])('carries %s to the host as the host reads it', (_what, status, expected) => {
    const report = linkReport(status);
    expect(report).toBeDefined();
    // Through the real control codec: what the member sends is what the host validates.
    const received = decodeControl(MemberToHost, encodeControl(report as MemberToHost));
    expect(received.type === 'link-status' || received.type === 'link-down').toBe(true);
    expect(reportedStatus(received as Parameters<typeof reportedStatus>[0])).toEqual(expected);
  });

  it.each<[string, RingLinkStatus]>([
    ['a connecting link', { peer: 2, state: 'connecting', kind: undefined, rttMs: undefined }],
    ['an up link before its RTT is measured', { peer: 2, state: 'up', kind: 'direct', rttMs: undefined }],
  ])('reports nothing for %s', (_what, status) => {
    expect(linkReport(status)).toBeUndefined();
  });

  it('cuts a long error to the message\'s 200 characters', () => {
    const report = linkReport({ peer: 2, state: 'failed', kind: undefined, rttMs: undefined, error: 'x'.repeat(500) });
    expect(report).toMatchObject({ type: 'link-down', reason: 'x'.repeat(200) });
  });
});
