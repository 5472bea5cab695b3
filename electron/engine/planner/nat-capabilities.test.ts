import { describe, expect, it } from 'vitest';
import { natFromCapabilities } from './nat-capabilities.js';
import { predictReach } from './nat-reach.js';

describe('NAT facts from a member\'s capabilities', () => {
  it('reads the class, mapping, inferred filtering and rendezvous RTT a member reported', () => {
    expect(natFromCapabilities({ nat: 'restrictive', nat_mapping: 'address-dependent', nat_filtering: 'port-dependent', rendezvous_rtt_ms: 12.5 }, ['ws://10.0.0.2:1'])).toEqual({
      nat: 'restrictive', natMapping: 'address-dependent', natFiltering: 'port-dependent', rendezvousRttMs: 12.5,
    });
  });

  it('leaves out what does not parse and what was not measured', () => {
    expect(natFromCapabilities({ nat: 'open', nat_mapping: 'unknown', nat_filtering: 7, rendezvous_rtt_ms: -1 })).toEqual({});
    expect(natFromCapabilities({ rendezvous_rtt_ms: Number.POSITIVE_INFINITY })).toEqual({});
    expect(natFromCapabilities(undefined)).toEqual({});
  });

  it('reads a member on --no-ice (capability ice: false) as taking no ICE links, so its edges are predicted TCP', () => {
    const noIce = { name: 'm', memoryBytes: 1, ...natFromCapabilities({ ice: false }, ['ws://127.0.0.1:5000']) };
    expect(noIce.takesIce).toBe(false);
    expect(predictReach({ name: 'h', memoryBytes: 1 }, noIce)).toBe('direct-tcp');
  });

  it('lets a member the rendezvous saw at its own address be dialed over TCP', () => {
    const open = { name: 'a', memoryBytes: 1, ...natFromCapabilities({ nat: 'permissive', nat_mapping: 'endpoint-independent', nat_none: true }, ['ws://203.0.113.5:1']) };
    const natted = { name: 'b', memoryBytes: 1, ...natFromCapabilities({ nat: 'permissive', nat_mapping: 'endpoint-independent' }, ['ws://192.168.1.5:1']) };
    const noIce = { name: 'c', memoryBytes: 1, ...natFromCapabilities({ ice: false }, ['ws://203.0.113.6:1']) };
    expect(predictReach(open, noIce)).toBe('direct-tcp');
    expect(predictReach(natted, noIce)).toBe('relayed');
  });

  it('marks a member that advertises no address as relay-only, so its edges are predicted relayed', () => {
    const relayOnly = { name: 'm', memoryBytes: 1, ...natFromCapabilities(undefined, []) };
    expect(relayOnly.takesDirect).toBe(false);
    expect(predictReach({ name: 'h', memoryBytes: 1 }, relayOnly)).toBe('relayed');
  });
});
