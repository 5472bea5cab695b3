import { describe, expect, it } from 'vitest';
import { parseIceServers, rendezvousStun } from './ice-servers.js';

describe('parseIceServers', () => {
  it('takes comma-separated STUN and TURN URLs', () => {
    expect(parseIceServers('stun:stun.example.org:3478, stun:[2001:db8::1]:3478', 'turn:u:p@turn.example.org:3478?transport=tcp'))
      .toEqual(['stun:stun.example.org:3478', 'stun:[2001:db8::1]:3478', 'turn:u:p@turn.example.org:3478?transport=tcp']);
    expect(parseIceServers(undefined, undefined)).toEqual([]);
  });

  it('refuses what is not a STUN or TURN URL, and too many servers', () => {
    expect(() => parseIceServers('http://x', undefined)).toThrow(expect.objectContaining({ code: 'USAGE' }));
    expect(() => parseIceServers(undefined, 'turn:nopassword.example.org:3478')).toThrow(expect.objectContaining({ code: 'USAGE' }));
    expect(() => parseIceServers(Array.from({ length: 9 }, (_, i) => `stun:s${i}.example.org:3478`).join(','), undefined)).toThrow(/At most 8/);
  });
});

describe('rendezvousStun', () => {
  it('names the STUN service beside a rendezvous', () => {
    expect(rendezvousStun('ws://203.0.113.5:7420')).toBe('stun:203.0.113.5:7420');
    expect(rendezvousStun('ws://[2001:db8::1]:7420')).toBe('stun:[2001:db8::1]:7420');
    expect(rendezvousStun('wss://rv.example.org')).toBe('stun:rv.example.org:443');
    expect(rendezvousStun('not a url')).toBeUndefined();
  });
});
