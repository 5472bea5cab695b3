import { describe, expect, it } from 'vitest';
import { defaultGateway4, localAddressFor, memberPortMapper, PortMapper, withMappedAddress } from './port-mapping.js';

const ROUTES = `Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
`;

describe('port mapping', () => {
  it('reads the IPv4 default gateway from the kernel\'s route table (little-endian hex)', () => {
    expect(defaultGateway4(ROUTES)).toBe('192.168.1.1');
    expect(defaultGateway4(ROUTES.split('\n').slice(0, 2).join('\n'))).toBeUndefined();
  });

  it('picks this machine\'s address on the gateway\'s subnet', () => {
    const nic = (address: string, netmask: string, internal = false) => ({ address, netmask, family: 'IPv4' as const, internal, mac: '', cidr: null });
    const interfaces = { lo: [nic('127.0.0.1', '255.0.0.0', true)], eth0: [nic('10.0.0.5', '255.255.0.0')], wlan0: [nic('192.168.1.23', '255.255.255.0')] };
    expect(localAddressFor('192.168.1.1', interfaces)).toBe('192.168.1.23');
    expect(localAddressFor('172.16.0.1', interfaces)).toBeUndefined();
  });

  it('maps only for a member with a non-loopback listener, no --advertise and mapping not turned off', () => {
    expect(memberPortMapper({ listenHost: '0.0.0.0' })).toBeInstanceOf(PortMapper);
    expect(memberPortMapper({ listenHost: '0.0.0.0', portMapping: false })).toBeUndefined();
    expect(memberPortMapper({ listenHost: '127.0.0.1' })).toBeUndefined();
    expect(memberPortMapper({})).toBeUndefined();
    expect(memberPortMapper({ listenHost: '0.0.0.0', advertise: ['ws://203.0.113.7:9000'] })).toBeUndefined();
  });

  it('advertises the listener\'s own addresses unchanged when nothing is mapped', async () => {
    const listening = ['ws://192.168.1.23:4000', 'ws://127.0.0.1:4000'];
    expect(await withMappedAddress(undefined, listening)).toEqual(listening);
    // A router that offers neither protocol: discovery finds nothing (NAT-PMP at a gateway that does not answer).
    const none = new PortMapper({ protocols: ['nat-pmp'], pmpGateway: '127.0.0.1', discoverMs: 200 });
    expect(await withMappedAddress(none, listening)).toEqual(listening);
    expect(none.protocol).toBeNull();
    await none.close();
  });
});
