import { describe, expect, it } from 'vitest';
import { natClass } from './control-status.js';

describe('natClass (a member NAT class for the control API)', () => {
  it('reads mapping, none and port mapping from the capabilities, filtering from the punches', () => {
    const caps = { nat: 'permissive', nat_mapping: 'endpoint-independent', nat_none: true, port_mapping: 'upnp' };
    expect(natClass(caps, { peer: 1, mapping: 'endpoint-independent', filtering: 'lenient' })).toEqual({ mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: 'upnp', none: true });
    expect(natClass(caps, undefined)).toEqual({ mapping: 'endpoint-independent', filtering: null, port_mapping: 'upnp', none: true });
  });

  it('prefers reported filtering, ignores values of the wrong shape, and is null before a measurement', () => {
    expect(natClass({ nat_mapping: 'address-dependent', nat_filtering: 'port-dependent', port_mapping: null }, { peer: 2, mapping: 'address-dependent', filtering: 'lenient' }))
      .toEqual({ mapping: 'address-dependent', filtering: 'port-dependent', port_mapping: null });
    expect(natClass({ nat_mapping: 'full-cone', port_mapping: 'pcp' }, undefined)).toBeNull();
    expect(natClass({ port_mapping: 'nat-pmp' }, undefined)).toEqual({ mapping: null, filtering: null, port_mapping: 'nat-pmp' });
    expect(natClass(undefined, undefined)).toBeNull();
  });
});
