import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { apiBrowserPolicy, warnIfUnprotected } from './api-flags.js';
import type { CommandContext } from './command.js';
import { eventPrinter } from './session-io.js';

const ctx = (values: CommandContext['values']): CommandContext => ({
  values, positionals: [], stdout: new PassThrough(), stderr: new PassThrough(), signal: new AbortController().signal,
});

describe('--cors-origin and --allowed-host', () => {
  it('are repeatable and normalized', () => {
    expect(apiBrowserPolicy(ctx({ 'cors-origin': ['https://Chat.Example/', 'http://localhost:3000', '*'], 'allowed-host': ['Kiwi.LAN', '[fe80::1]', '*'] }))).toEqual({
      corsOrigins: ['https://chat.example', 'http://localhost:3000', '*'],
      allowedHosts: ['kiwi.lan', 'fe80::1', '*'],
    });
    expect(apiBrowserPolicy(ctx({}))).toEqual({ corsOrigins: [], allowedHosts: [] });
  });

  it.each([
    ['cors-origin', 'chat.example', /--cors-origin must be an origin/],
    ['cors-origin', 'https://chat.example/path', /--cors-origin must be an origin/],
    ['cors-origin', 'https://127.0.0.1:1@evil.example', /--cors-origin must be an origin/],
    ['cors-origin', 'file:///x', /--cors-origin must be an origin/],
    ['allowed-host', 'kiwi.lan:8080', /--allowed-host takes a host name without port/],
    ['allowed-host', 'http://kiwi.lan', /--allowed-host takes a host name/],
  ])('refuse --%s %s', (flag, value, message) => {
    expect(() => apiBrowserPolicy(ctx({ [flag]: [value] }))).toThrow(message);
  });
});

describe('the unprotected-API warning', () => {
  function run(host: string, key: string | undefined): { events: string; stderr: string } {
    const out = new PassThrough();
    const err = new PassThrough();
    warnIfUnprotected(eventPrinter(out, true), err, 'host', host, key);
    return { events: String(out.read() ?? ''), stderr: String(err.read() ?? '') };
  }

  it('is a warning event and a line on stderr when the API listens beyond loopback without a key', () => {
    const r = run('0.0.0.0', undefined);
    expect(JSON.parse(r.events)).toMatchObject({ event: 'warning', code: 'API_UNPROTECTED' });
    expect(r.stderr).toMatch(/^kiwi host: warning: the API listens on 0\.0\.0\.0 without --api-key/);
  });

  it.each([['127.0.0.1', undefined], ['::1', undefined], ['0.0.0.0', 'key']])('is silent for %s with key %s', (host, key) => {
    expect(run(host, key)).toEqual({ events: '', stderr: '' });
  });
});
