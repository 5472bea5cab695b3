import { describe, expect, it } from 'vitest';
import { lanBeaconWanted, type HostOptions } from './host.js';

describe('announcing the embedded rendezvous on the LAN', () => {
  it.each([
    ['not for a loopback rendezvous by default', '127.0.0.1', undefined, false],
    ['not for ::1 or localhost by default', '::1', undefined, false],
    ['for a wildcard bind by default', '0.0.0.0', undefined, true],
    ['for a LAN address by default', '192.168.1.20', undefined, true],
    ['never when turned off', '0.0.0.0', false, false],
    ['on loopback when a test asks for it', '127.0.0.1', { targets: ['127.0.0.1'] }, true],
  ] as Array<[string, string, HostOptions['lanBeacon'], boolean]>)('%s', (_what, bindHost, lanBeacon, expected) => {
    expect(lanBeaconWanted(bindHost, lanBeacon)).toBe(expected);
  });
});
