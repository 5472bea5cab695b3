import { describe, expect, it } from 'vitest';
import { natClassText } from './nat-text.js';

describe('natClassText', () => {
  it('names mapping, filtering and the router port mapping', () => {
    expect(natClassText({ mapping: 'endpoint-independent', filtering: null, port_mapping: 'upnp' })).toBe('endpoint-independent mapping, filtering unknown · port mapped (UPnP)');
    expect(natClassText({ mapping: 'address-dependent', filtering: 'port-dependent', port_mapping: 'nat-pmp' })).toBe('address-dependent mapping, port-dependent filtering · port mapped (NAT-PMP)');
    expect(natClassText({ mapping: null, filtering: null, port_mapping: null })).toBe('mapping unknown, filtering unknown · port not mapped');
  });

  it('says when the rendezvous saw no NAT, and when nothing was measured', () => {
    expect(natClassText({ mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: null, none: true })).toBe('none (the rendezvous saw its own address), endpoint-independent mapping, lenient filtering · port not mapped');
    expect(natClassText(null)).toBe('not measured');
    expect(natClassText(undefined)).toBe('not measured');
  });
});
