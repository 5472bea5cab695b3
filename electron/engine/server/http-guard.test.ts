import { describe, expect, it } from 'vitest';
import { createHttpGuard, hostnameOf, isJson, isLocalOrigin, parseOrigin, type GuardDecision, type HttpGuardOptions } from './http-guard.js';

const loopback: HttpGuardOptions = { listenHost: '127.0.0.1' };
const json = { 'content-type': 'application/json', 'content-length': '2' };

function decide(opts: HttpGuardOptions, method: string, headers: Record<string, string>): GuardDecision {
  return createHttpGuard(opts)({ method, headers });
}

describe('the Host check (DNS rebinding)', () => {
  const table: [string, HttpGuardOptions, string, 'pass' | 'refuse'][] = [
    ['localhost with a port', loopback, 'localhost:8080', 'pass'],
    ['127.0.0.1 with a port', loopback, '127.0.0.1:8080', 'pass'],
    ['[::1] with a port', loopback, '[::1]:8080', 'pass'],
    ['localhost without a port', loopback, 'localhost', 'pass'],
    ['upper case and a trailing dot', loopback, 'LOCALHOST.:1', 'pass'],
    ['a rebinding name', loopback, 'evil.example:8080', 'refuse'],
    ['a name ending in localhost', loopback, 'evillocalhost:8080', 'refuse'],
    ['a LAN address while on loopback', loopback, '192.168.1.5:8080', 'refuse'],
    ['user info smuggled into Host', loopback, '127.0.0.1:8080@evil.example', 'refuse'],
    ['a malformed Host', loopback, '[zz]:1', 'refuse'],
    ['a configured name', { ...loopback, allowedHosts: ['kiwi.lan'] }, 'kiwi.lan:8080', 'pass'],
    ['a configured name, any case', { ...loopback, allowedHosts: ['Kiwi.LAN'] }, 'kiwi.lan', 'pass'],
    ['anything with --allowed-host *', { ...loopback, allowedHosts: ['*'] }, 'evil.example', 'pass'],
    ['the listen address itself', { listenHost: '127.0.0.5' }, '127.0.0.5:80', 'pass'],
    ['a LAN address when listening on all interfaces', { listenHost: '0.0.0.0' }, '192.168.1.5:8080', 'pass'],
    ['an IPv6 address when listening on ::', { listenHost: '::' }, '[fe80::1]:8080', 'pass'],
    ['a rebinding name when listening on all interfaces', { listenHost: '0.0.0.0' }, 'evil.example:8080', 'refuse'],
  ];
  it.each(table)('%s', (_what, opts, host, expected) => {
    const d = decide(opts, 'GET', { host });
    expect(d.kind === 'refuse' ? 'refuse' : 'pass').toBe(expected);
    if (d.kind === 'refuse') expect(d).toMatchObject({ status: 403, code: 'HTTP_HOST_NOT_ALLOWED', reason: 'host_not_allowed' });
  });

  it('passes a request without Host (not a browser)', () => {
    expect(decide(loopback, 'GET', {}).kind).toBe('pass');
  });

  it('names the flag that allows a refused name', () => {
    const d = decide(loopback, 'GET', { host: 'kiwi.lan:8080' });
    expect(d.kind === 'refuse' && d.message).toContain('--allowed-host kiwi.lan');
  });
});

describe('the Content-Type rule', () => {
  const table: [string, string, Record<string, string>, number | 'pass'][] = [
    ['JSON', 'POST', json, 'pass'],
    ['JSON with a charset', 'POST', { 'content-type': 'application/json; charset=utf-8', 'content-length': '2' }, 'pass'],
    ['a +json type', 'POST', { 'content-type': 'application/merge-patch+json', 'content-length': '2' }, 'pass'],
    ['text/plain (a simple form)', 'POST', { 'content-type': 'text/plain', 'content-length': '2' }, 415],
    ['a url-encoded form (curl -d)', 'POST', { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '2' }, 415],
    ['multipart', 'POST', { 'content-type': 'multipart/form-data; boundary=x', 'content-length': '2' }, 415],
    ['a body without a type', 'POST', { 'content-length': '2' }, 415],
    ['a chunked body without a type', 'POST', { 'transfer-encoding': 'chunked' }, 415],
    ['text/plain even with an empty body', 'POST', { 'content-type': 'text/plain', 'content-length': '0' }, 415],
    ['a POST without a body', 'POST', { 'content-length': '0' }, 'pass'],
    ['a POST without any body header', 'POST', {}, 'pass'],
    ['a GET', 'GET', { 'content-type': 'text/plain' }, 'pass'],
  ];
  it.each(table)('%s', (_what, method, headers, expected) => {
    const d = decide(loopback, method, { host: '127.0.0.1:8080', ...headers });
    if (expected === 'pass') expect(d.kind).toBe('pass');
    else expect(d).toMatchObject({ kind: 'refuse', status: 415, code: 'HTTP_UNSUPPORTED_MEDIA_TYPE' });
  });

  it('tells a curl -d user which header to send', () => {
    const d = decide(loopback, 'POST', { host: '127.0.0.1:8080', 'content-type': 'application/x-www-form-urlencoded', 'content-length': '9' });
    expect(d.kind === 'refuse' && d.message).toContain("-H 'Content-Type: application/json'");
  });

  it('is checked before the Origin, so a cross-site form post gets 415', () => {
    expect(decide(loopback, 'POST', { host: '127.0.0.1:8080', origin: 'http://evil.example', 'content-type': 'text/plain', 'content-length': '2' })).toMatchObject({ status: 415 });
  });
});

describe('CORS', () => {
  const host = '127.0.0.1:8080';
  const preflight = (origin: string, extra: Record<string, string> = {}) => ({
    host, origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type', ...extra,
  });
  const table: [string, HttpGuardOptions, string, boolean][] = [
    ['http://localhost with a port', loopback, 'http://localhost:5173', true],
    ['http://127.0.0.1 with a port', loopback, 'http://127.0.0.1:3000', true],
    ['http://[::1] with a port', loopback, 'http://[::1]:3000', true],
    ['https://localhost', loopback, 'https://localhost', true],
    ['another loopback address', loopback, 'http://127.0.0.2:3000', false],
    ['a remote site', loopback, 'https://evil.example', false],
    ['a look-alike with user info', loopback, 'http://127.0.0.1:8080@evil.example', false],
    ['a look-alike subdomain', loopback, 'http://localhost.evil.example', false],
    ['the null origin', loopback, 'null', false],
    ['a configured origin', { ...loopback, corsOrigins: ['https://chat.example'] }, 'https://chat.example', true],
    ['a configured origin with a trailing slash', { ...loopback, corsOrigins: ['https://chat.example/'] }, 'https://chat.example', true],
    ['another port of a configured origin', { ...loopback, corsOrigins: ['https://chat.example'] }, 'https://chat.example:8443', false],
    ['anything with --cors-origin *', { ...loopback, corsOrigins: ['*'] }, 'https://evil.example', true],
  ];
  it.each(table)('preflight from %s', (_what, opts, origin, allowed) => {
    const d = decide(opts, 'OPTIONS', preflight(origin));
    if (!allowed) {
      expect(d).toMatchObject({ kind: 'refuse', status: 403, code: 'HTTP_ORIGIN_NOT_ALLOWED' });
      expect(d.headers['access-control-allow-origin']).toBeUndefined();
      return;
    }
    expect(d).toMatchObject({ kind: 'answer', status: 204 });
    expect(d.headers['access-control-allow-origin']).toBe(opts.corsOrigins?.includes('*') ? '*' : origin);
    expect(d.headers['access-control-allow-methods']).toBe('GET, POST');
    expect(d.headers['access-control-allow-headers']).toBe('authorization, content-type');
    expect(d.headers.vary).toBe('Origin');
  });

  it.each(table)('real request from %s', (_what, opts, origin, allowed) => {
    const d = decide(opts, 'POST', { host, origin, ...json });
    if (!allowed) {
      expect(d).toMatchObject({ kind: 'refuse', status: 403, code: 'HTTP_ORIGIN_NOT_ALLOWED' });
      return;
    }
    expect(d.kind).toBe('pass');
    expect(d.headers['access-control-allow-origin']).toBe(opts.corsOrigins?.includes('*') ? '*' : origin);
  });

  it('allows what the OpenAI SDK sends from a browser and refuses other headers', () => {
    const sdk = decide(loopback, 'OPTIONS', preflight('http://localhost:3000', { 'access-control-request-headers': 'authorization,content-type,x-stainless-os,x-stainless-retry-count' }));
    expect(sdk.kind).toBe('answer');
    expect(sdk.headers['access-control-allow-headers']).toContain('x-stainless-os');
    const other = decide(loopback, 'OPTIONS', preflight('http://localhost:3000', { 'access-control-request-headers': 'x-evil' }));
    expect(other).toMatchObject({ kind: 'refuse', status: 403, reason: 'header_not_allowed' });
  });

  it('refuses a preflight for a method the routes do not answer', () => {
    expect(decide(loopback, 'OPTIONS', preflight('http://localhost:3000', { 'access-control-request-method': 'DELETE' }))).toMatchObject({ kind: 'refuse', status: 403 });
  });

  it('answers Private Network Access for an allowed origin', () => {
    const d = decide({ ...loopback, corsOrigins: ['https://chat.example'] }, 'OPTIONS', preflight('https://chat.example', { 'access-control-request-private-network': 'true' }));
    expect(d.headers['access-control-allow-private-network']).toBe('true');
  });

  it('answers a plain OPTIONS (no preflight) with Allow', () => {
    expect(decide(loopback, 'OPTIONS', { host })).toEqual({ kind: 'answer', status: 204, headers: { vary: 'Origin', allow: 'GET, POST, OPTIONS' } });
  });

  it('passes requests without an Origin (curl, SDKs outside browsers) without CORS headers', () => {
    expect(decide(loopback, 'POST', { host, ...json })).toEqual({ kind: 'pass', headers: { vary: 'Origin' } });
  });

  it('allows a same-origin page served by this server on a LAN address', () => {
    expect(decide({ listenHost: '0.0.0.0' }, 'POST', { host: '192.168.1.5:49152', origin: 'http://192.168.1.5:49152', ...json }).kind).toBe('pass');
    expect(decide({ listenHost: '0.0.0.0' }, 'POST', { host: '192.168.1.5:49152', origin: 'http://192.168.1.6:49152', ...json }).kind).toBe('refuse');
  });
});

describe('the parsing helpers', () => {
  it.each([
    ['http://localhost:5173', 'http://localhost:5173'],
    ['HTTP://LOCALHOST:80', 'http://localhost'],
    ['https://a.example/', 'https://a.example'],
    ['http://127.0.0.1:8080@evil.example', null],
    ['http://a.example/path', null],
    ['file:///etc/passwd', null],
    ['null', null],
  ])('parseOrigin(%s) is %s', (input, expected) => expect(parseOrigin(input)).toBe(expected));

  it.each([
    ['localhost:8080', 'localhost'],
    ['[::1]:8080', '::1'],
    ['[::1]', '::1'],
    ['Example.COM.', 'example.com'],
    ['a b', null],
    ['x:99999999', null],
  ])('hostnameOf(%s) is %s', (input, expected) => expect(hostnameOf(input)).toBe(expected));

  it('knows local origins and JSON types', () => {
    expect(isLocalOrigin('http://[::1]:1')).toBe(true);
    expect(isLocalOrigin('http://localhost@evil.example')).toBe(false);
    expect(isJson('Application/JSON; charset=utf-8')).toBe(true);
    expect(isJson('text/json')).toBe(false);
  });
});
