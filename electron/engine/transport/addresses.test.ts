import type { NetworkInterfaceInfo } from 'node:os';
import { describe, expect, it } from 'vitest';
import { reachableHosts, wsUrls } from './addresses.js';

const iface = (address: string, family: 'IPv4' | 'IPv6', internal: boolean): NetworkInterfaceInfo =>
  ({ address, family, internal, netmask: '', mac: '', cidr: null }) as NetworkInterfaceInfo;

const interfaces = {
  lo: [iface('127.0.0.1', 'IPv4', true), iface('::1', 'IPv6', true)],
  eth0: [iface('192.168.1.20', 'IPv4', false), iface('fe80::1', 'IPv6', false)],
  wlan0: [iface('10.0.0.7', 'IPv4', false)],
};

describe('reachable addresses', () => {
  it('keeps a specific bind address as it is', () => {
    expect(reachableHosts('127.0.0.1', interfaces)).toEqual(['127.0.0.1']);
  });

  it('expands a wildcard bind to the IPv4 interface addresses, loopback last', () => {
    expect(reachableHosts('0.0.0.0', interfaces)).toEqual(['192.168.1.20', '10.0.0.7', '127.0.0.1']);
  });

  it('falls back to loopback when no interface is known', () => {
    expect(reachableHosts('::', {})).toEqual(['127.0.0.1']);
  });

  it('formats WebSocket URLs', () => {
    expect(wsUrls('0.0.0.0', 7420, { lo: interfaces.lo })).toEqual(['ws://127.0.0.1:7420']);
    expect(wsUrls('::1', 80)).toEqual(['ws://[::1]:80']);
  });
});
