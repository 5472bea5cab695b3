import { describe, expect, it } from 'vitest';
import { natCapabilities, stunTarget } from './nat-report.js';

describe('the STUN server of a rendezvous URL', () => {
  it.each([
    ['a ws URL with its port', 'ws://10.0.0.1:7420', { host: '10.0.0.1', port: 7420 }],
    ['ws on port 80 by default', 'ws://rv.example', { host: 'rv.example', port: 80 }],
    ['wss on port 443 by default', 'wss://rv.example/', { host: 'rv.example', port: 443 }],
    ['an IPv6 host without its brackets', 'ws://[::1]:7420', { host: '::1', port: 7420 }],
    ['nothing for what is not a URL', 'not a url', undefined],
  ] as const)('%s', (_what, url, expected) => {
    expect(stunTarget(url)).toEqual(expected);
  });
});

describe('what a probe adds to the capabilities', () => {
  const mapped = { family: 'IPv4' as const, address: '198.51.100.4', port: 50000 };
  it('names a symmetric NAT restrictive, with its round trip', () => {
    expect(natCapabilities({ mapping: 'address-dependent', natClass: 'restrictive', mapped, local: false, rttMs: 12.34567 }))
      .toEqual({ nat: 'restrictive', nat_mapping: 'address-dependent', rendezvous_rtt_ms: 12.346 });
  });

  it('marks no NAT (its own address seen) as none and unfiltered, and reports nothing for an unknown mapping', () => {
    expect(natCapabilities({ mapping: 'endpoint-independent', natClass: 'permissive', mapped, local: true, rttMs: 1 }))
      .toEqual({ nat: 'permissive', nat_mapping: 'endpoint-independent', rendezvous_rtt_ms: 1, nat_none: true, nat_filtering: 'lenient' });
    expect(natCapabilities({ mapping: 'unknown', natClass: undefined, mapped, local: false, rttMs: 1 })).toBeUndefined();
  });
});
