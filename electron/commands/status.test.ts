import { describe, expect, it } from 'vitest';
import type { SessionStatus } from '../../common/control-api.js';
import { formatStatus } from './status.js';

const base: SessionStatus = {
  role: 'host', phase: 'active', paused: false, code: '7-word-word', rendezvous: 'ws://203.0.113.1:7420', self_peer: 0, model: null,
  members: [], ring: [0], links: [], plan: null, plan_error: null, assignment: null, ring_state: null, flow: null, download: null, serving: null, error: null,
};
const target = { url: 'http://127.0.0.1:9000/api', pid: 42 };

describe("kiwi status: the host's NAT", () => {
  it('names the class the host measured against its rendezvous', () => {
    const text = formatStatus({ ...base, host_nat: { mapping: 'address-dependent', filtering: null, port_mapping: null } }, target);
    expect(text).toMatch(/^Host NAT: address-dependent mapping, filtering unknown · port not mapped$/m);
  });

  it('says none for a host with its embedded rendezvous, not measured before a probe, nothing for a member', () => {
    expect(formatStatus({ ...base, host_nat: { mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: null, none: true } }, target)).toMatch(/^Host NAT: none \(/m);
    expect(formatStatus({ ...base, host_nat: null }, target)).toMatch(/^Host NAT: not measured$/m);
    expect(formatStatus({ ...base, role: 'member', self_peer: 1 }, target)).not.toMatch(/Host NAT/);
  });
});
