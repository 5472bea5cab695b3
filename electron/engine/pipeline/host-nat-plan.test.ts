// The host's own NAT in the plan (ring-assignment.ts planSessionRing hostCapabilities): the edges
// touching the host are predicted from its measured class, as a member's are from its own.
import { describe, expect, it } from 'vitest';
import type { ModelSizes } from '../planner/fleet.js';
import { embeddedRendezvousNat, natCapabilities } from '../session/nat-report.js';
import type { MemberView } from '../session/host.js';
import { planSessionRing } from './ring-assignment.js';

const model: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
const mapped = { address: '203.0.113.7', port: 40000, family: 'IPv4' as const };
const symmetric = natCapabilities({ mapping: 'address-dependent', natClass: 'restrictive', mapped, local: false, rttMs: 20 })!;
const member: MemberView = {
  memberId: 'id1', name: 'ada', fingerprint: 'abcd-0000', peer: 1, state: 'active', connected: true, addresses: ['ws://192.168.1.5:7000'], lastSeenMs: 0,
  capabilities: { fleet_device: { memory_bytes: 4_000_000_000 }, ...symmetric },
};

function hostEdges(hostCapabilities: Readonly<Record<string, unknown>> | undefined): string[] {
  const { plan } = planSessionRing({
    members: [member], memoryLimits: new Map(), serving: undefined, model, context: 256, concurrency: 1,
    hostName: 'host', hostDevice: { memoryBytes: 4_000_000_000 }, links: [], ...(hostCapabilities !== undefined ? { hostCapabilities } : {}),
  });
  return plan.edges.map((e) => `${e.from}>${e.to} ${e.predicted}`);
}

describe("the host's NAT in the plan", () => {
  it('predicts a relay between a symmetric host and a symmetric member', () => {
    expect(hostEdges(symmetric)).toEqual(['host>ada relayed', 'ada>host relayed']);
  });

  it('keeps the punch where the host has no NAT (its embedded rendezvous) or measured none', () => {
    expect(hostEdges(embeddedRendezvousNat())).toEqual(['host>ada direct-udp', 'ada>host direct-udp']);
    expect(hostEdges(undefined)).toEqual(['host>ada direct-udp', 'ada>host direct-udp']);
  });

  it('prices the relayed edge by both round trips to the rendezvous', () => {
    const { plan } = planSessionRing({
      members: [member], memoryLimits: new Map(), serving: undefined, model, context: 256, concurrency: 1,
      hostName: 'host', hostDevice: { memoryBytes: 4_000_000_000 }, links: [], hostCapabilities: { ...symmetric, rendezvous_rtt_ms: 5 },
    });
    expect(plan.edges.map((e) => e.latency_ms)).toEqual([25, 25]);
  });
});
