// The control API's snapshots, pure: a hosted session or a joined member as the wire's
// SessionStatus (common/control-api.ts), and a device benchmark as its device card.
import type {
  DeviceCard, DeviceSummary, DownloadWire, JoinRequest, LinkWire, MemberNatClassWire, MemberNatWire, MemberStateWire, MemberWire, SessionStatus,
} from '../../../common/control-api.js';
import type { DeviceBenchJson } from '../device/device-bench.js';
import type { MemberIdentity } from '../session/identity.js';
import type { MemberSession } from '../session/member.js';
import type { Capabilities } from '../session/membership.js';
import type { HostedSession, MemberRing, WireError } from './control-hooks.js';

/** A session this machine joined (or is joining, or paused), as SessionControl keeps it. */
export interface Joined {
  member: MemberSession | undefined;
  ring: MemberRing | undefined;
  req: JoinRequest & { rendezvous: string };
  memberId: string | undefined;
  /** Without opts.join.identity: the key made for this join, kept across pause and resume. */
  identity?: MemberIdentity;
  phase: SessionStatus['phase'];
}

export const IDLE_DEVICE: DeviceCard = { state: 'idle', progress: null, fraction: null, summary: null, error: null };

/**
 * The snapshot of whichever session there is (at most one): the host's members, links and plan, or
 * the member's roster, links and assignment (`assignment` overrides the ring's), else idle.
 */
export function sessionStatus(c: {
  hosted: HostedSession | undefined; joined: Joined | undefined; download: DownloadWire | null; error: WireError | null; assignment?: (() => SessionStatus['assignment']) | undefined;
}): SessionStatus {
  const base: SessionStatus = {
    role: 'none', phase: 'idle', paused: false, code: null, rendezvous: null, self_peer: null, model: null,
    members: [], ring: [], links: [], plan: null, plan_error: null, assignment: null, ring_state: null, flow: null, download: c.download,
    serving: null, error: c.error,
  };
  if (c.hosted !== undefined) {
    const s = c.hosted.session.status();
    const plan = c.hosted.plan?.() ?? { plan: null, error: null };
    return {
      ...base, role: 'host', phase: 'active', code: s.code, rendezvous: s.rendezvousUrl, self_peer: 0, model: c.hosted.model,
      host_nat: natClass(c.hosted.session.natCapabilities, undefined),
      members: s.members.map((m): MemberWire => ({
        member_id: m.memberId, name: m.name, fingerprint: m.fingerprint, peer: m.peer, state: m.state, connected: m.connected, in_ring: s.ring.includes(m.peer), addresses: [...m.addresses],
        ...capabilityFigures(m.capabilities),
        nat: natClass(m.capabilities, plan.plan?.nat?.find((n) => n.peer === m.peer)),
      })),
      ring: s.ring,
      links: s.links.map((l): LinkWire => ({ a: l.a, b: l.b, state: l.state, kind: l.kind ?? null, rtt_ms: l.rttMs ?? null })),
      plan: plan.plan, plan_error: plan.error, serving: c.hosted.serving,
      ring_state: c.hosted.ringState?.() ?? null, flow: c.hosted.flow?.() ?? null,
    };
  }
  if (c.joined !== undefined) {
    const j = c.joined;
    const self = j.member?.peer ?? null;
    return {
      ...base, role: 'member', phase: j.phase, paused: j.phase === 'paused', code: j.req.code, rendezvous: j.req.rendezvous === '' ? null : j.req.rendezvous, self_peer: self,
      self_fingerprint: j.member?.fingerprint ?? null,
      // The host's roster names everyone, so the member's ring shows names, not peer numbers.
      members: (j.member?.roster() ?? []).map((r) => {
        const w = rosterMember(r);
        // A member knows its own NAT class (what it reported to the host), not the others'.
        const m = j.member;
        return r.peer === self && m?.natMapping !== undefined
          ? { ...w, nat: { mapping: m.natMapping === 'unknown' ? null : m.natMapping, filtering: null, port_mapping: m.portMapping?.protocol ?? null } }
          : w;
      }),
      links: self === null ? [] : (j.member?.linkStatuses() ?? []).map((l): LinkWire => ({ a: self, b: l.peer, state: l.state, kind: l.kind ?? null, rtt_ms: l.rttMs ?? null })),
      assignment: j.phase === 'active' ? (c.assignment?.() ?? j.ring?.assignment() ?? null) : null,
      flow: j.phase === 'active' ? (j.ring?.flow() ?? null) : null,
    };
  }
  return base;
}

/** "memory bandwidth: round 3/8: ..." → 3/8 of the bandwidth part. */
export function progressFraction(message: string): number | null {
  const m = /round (\d+)\/(\d+)/.exec(message);
  if (m === null) return null;
  const total = Number(m[2]);
  return total > 0 ? Math.min(1, Number(m[1]) / total) : null;
}

export function deviceSummary(r: DeviceBenchJson): DeviceSummary {
  return {
    hostname: r.host.hostname,
    platform: `${r.host.platform} ${r.host.arch}`,
    cpu: r.cpu.model,
    cores: r.cpu.cores,
    memory_total_bytes: r.memory.total_bytes,
    memory_available_bytes: r.memory.available_bytes,
    gpus: r.gpus.map((g) => ({ name: g.name, vendor: g.vendor, vram_total_bytes: g.vram_total_bytes, vram_free_bytes: g.vram_free_bytes })),
    providers: r.execution_providers.filter((p) => p.works).map((p) => p.name),
    host_bandwidth_gbps: r.bandwidth.host_gbps,
    provider_bandwidth: r.bandwidth.providers.map((p) => ({ provider: p.provider, gbps: p.gbps })),
    measured_at: r.measured_at,
    cached: r.cached,
  };
}

const MEMBER_STATES: ReadonlySet<string> = new Set<MemberStateWire>(['pending', 'active', 'soft-evicted', 'evicted', 'left', 'rejected']);

/** A roster entry (what the host tells members about each other) as the wire's member. */
function rosterMember(r: { peer: number; name: string; state: string; inRing: boolean; connected?: boolean }): MemberWire {
  const state = MEMBER_STATES.has(r.state) ? (r.state as MemberStateWire) : 'active';
  return {
    member_id: `peer-${r.peer}`, name: r.name, peer: r.peer, state, connected: r.connected ?? state === 'active', in_ring: r.inRing,
    addresses: [], memory_bytes: null, bandwidth_gbps: null,
  };
}

/** Memory and bandwidth from a member's reported benchmark (untrusted shape: read defensively). */
function capabilityFigures(c: Capabilities | undefined): Pick<MemberWire, 'memory_bytes' | 'bandwidth_gbps'> {
  const fleet = c?.fleet_device;
  const f = typeof fleet === 'object' && fleet !== null ? (fleet as Record<string, unknown>) : {};
  const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  return { memory_bytes: num(f.memory_bytes), bandwidth_gbps: num(f.bandwidth_gbps) };
}

/**
 * A member's NAT class from its capabilities (session/member.ts reportNat: `nat_mapping`,
 * `nat_none`, `port_mapping`; untrusted shape) and the filtering its punches showed (the plan's
 * `nat`, pipeline/edge-report.ts); null until it measured a mapping.
 */
export function natClass(c: Capabilities | undefined, inferred: MemberNatWire | undefined): MemberNatClassWire | null {
  const mapping = c?.nat_mapping === 'endpoint-independent' || c?.nat_mapping === 'address-dependent' ? c.nat_mapping : null;
  const reported = c?.nat_filtering === 'lenient' || c?.nat_filtering === 'port-dependent' ? c.nat_filtering : null;
  const portMapping = c?.port_mapping === 'upnp' || c?.port_mapping === 'nat-pmp' ? c.port_mapping : null;
  if (mapping === null && portMapping === null) return null;
  return { mapping, filtering: reported ?? inferred?.filtering ?? null, port_mapping: portMapping, ...(c?.nat_none === true ? { none: true } : {}) };
}
