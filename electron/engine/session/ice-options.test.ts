import { describe, expect, it } from 'vitest';
import { ringIceOptions } from './ice-options.js';

describe('ring ICE options', () => {
  it.each([
    ['relay only (no listener)', 'ws://10.0.0.1:7420', undefined, undefined, undefined],
    ['--no-ice', 'ws://10.0.0.1:7420', false, '0.0.0.0', undefined],
    ['the rendezvous STUN by default', 'ws://10.0.0.1:7420', undefined, '0.0.0.0', { iceServers: ['stun:10.0.0.1:7420'] }],
    ['wss on its default port', 'wss://rv.example', undefined, '0.0.0.0', { iceServers: ['stun:rv.example:443'] }],
    ['the rendezvous STUN before named servers, with a timeout', 'ws://10.0.0.1:7420', { iceServers: ['turn:u:p@t.example:3478'], timeoutMs: 900 }, '0.0.0.0',
      { iceServers: ['stun:10.0.0.1:7420', 'turn:u:p@t.example:3478'], timeoutMs: 900 }],
    ['only named servers when the rendezvous URL has no host', 'not a url', { iceServers: ['stun:s.example:3478'] }, '127.0.0.1', { iceServers: ['stun:s.example:3478'] }],
  ] as const)('%s', (_what, url, ice, listenHost, expected) => {
    expect(ringIceOptions(url, ice, listenHost)).toEqual(expected);
  });
});
