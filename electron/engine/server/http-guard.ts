// The browser-facing policy of Kiwi's HTTP servers (OpenAI API and control API), applied before
// routing: the Host check against DNS rebinding, the Content-Type rule against cross-site "simple"
// POSTs, and CORS (Fetch standard, https://fetch.spec.whatwg.org/#http-cors-protocol). Pure: a
// request's method and headers in, a decision out; the servers only write what it says.
import type { IncomingHttpHeaders } from 'node:http';
import type { KiwiErrorCode } from '../errors.js';

export interface HttpGuardOptions {
  /** The address the server listens on ('127.0.0.1', '0.0.0.0', '::', a LAN address). */
  listenHost: string;
  /** More Host names to accept (`--allowed-host`), without port; '*' accepts any Host. */
  allowedHosts?: readonly string[];
  /** More origins that may call from a browser (`--cors-origin`), e.g. https://chat.example; '*' allows any. */
  corsOrigins?: readonly string[];
  /** Methods the routes answer (for preflights). Default GET, POST. */
  methods?: readonly string[];
}

export interface GuardRequest {
  method: string;
  /** Lower-case header names. */
  headers: Readonly<Record<string, string | undefined>>;
}

export type GuardDecision =
  /** Route the request; add `headers` (CORS) to whatever it answers, streams included. */
  | { kind: 'pass'; headers: Record<string, string> }
  /** Answer at once with `status` and `headers`, no body (an OPTIONS request). */
  | { kind: 'answer'; status: number; headers: Record<string, string> }
  | { kind: 'refuse'; status: number; code: KiwiErrorCode; /** snake_case, for OpenAI error bodies */ reason: string; message: string; headers: Record<string, string> };

/** Request headers a browser page may send: what the OpenAI SDKs send from a browser, and no more. */
const ALLOWED_HEADERS = ['authorization', 'content-type', 'accept', 'openai-organization', 'openai-project', 'openai-beta'];
const ALLOWED_HEADER_PREFIXES = ['x-stainless-'];
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];
const PREFLIGHT_MAX_AGE_S = 600;

export function createHttpGuard(opts: HttpGuardOptions): (req: GuardRequest) => GuardDecision {
  const methods = (opts.methods ?? ['GET', 'POST']).map((m) => m.toUpperCase());
  const anyHost = (opts.allowedHosts ?? []).includes('*');
  const hosts = new Set([...LOOPBACK_NAMES, ...(opts.allowedHosts ?? []).map(normalizeHostname)]);
  const listen = normalizeHostname(opts.listenHost);
  if (!isWildcard(listen)) hosts.add(listen);
  // Beyond loopback, clients reach the server by an IP address: an IP literal in Host cannot be a
  // rebinding (that needs a name the attacker's DNS answers), so any is fine there.
  const anyIpLiteral = !isLoopbackAddress(listen);
  const anyOrigin = (opts.corsOrigins ?? []).includes('*');
  const origins = new Set((opts.corsOrigins ?? []).filter((o) => o !== '*').map((o) => parseOrigin(o) ?? o));

  function hostAllowed(hostHeader: string | undefined): boolean {
    if (anyHost || hostHeader === undefined) return true; // no Host: not a browser (they always send it)
    const name = hostnameOf(hostHeader);
    if (name === null) return false;
    return hosts.has(name) || (anyIpLiteral && isIpLiteral(name));
  }

  function originAllowed(origin: string, hostHeader: string | undefined): boolean {
    const parsed = parseOrigin(origin);
    if (parsed === null) return anyOrigin; // 'null' (sandboxed frames, file://) or garbage
    if (anyOrigin || origins.has(parsed) || isLocalOrigin(parsed)) return true;
    // Same origin: the page came from this server (the UI served by the control API on a LAN address).
    return hostHeader !== undefined && parsed === parseOrigin(`http://${hostHeader.trim()}`);
  }

  return (req) => {
    const h = req.headers;
    const method = req.method.toUpperCase();
    const vary = { vary: 'Origin' };
    if (!hostAllowed(h.host)) {
      return refuse(403, 'HTTP_HOST_NOT_ALLOWED', 'host_not_allowed', vary,
        `Host '${h.host}' is not allowed (a protection against DNS rebinding). Use http://127.0.0.1 or http://localhost, or start Kiwi with --allowed-host ${hostnameOf(h.host ?? '') ?? 'NAME'}.`);
    }
    const origin = h.origin;
    const originOk = origin === undefined || originAllowed(origin, h.host);
    const cors: Record<string, string> = origin === undefined || !originOk ? vary : { ...vary, 'access-control-allow-origin': anyOrigin ? '*' : origin };
    // Before the Origin check: a cross-site form post is refused for its body type either way, and a
    // `curl -d` user (no Origin) learns which header to send.
    if (method !== 'OPTIONS' && hasBody(req) && !isJson(h['content-type'])) {
      return refuse(415, 'HTTP_UNSUPPORTED_MEDIA_TYPE', 'unsupported_media_type', cors,
        `The request body must be JSON sent with the header 'Content-Type: application/json'` +
          `${h['content-type'] !== undefined ? ` (got '${h['content-type']}')` : ' (none was sent)'}; with curl, add -H 'Content-Type: application/json'.`);
    }
    if (!originOk) {
      return refuse(403, 'HTTP_ORIGIN_NOT_ALLOWED', 'origin_not_allowed', vary,
        `Origin '${origin}' may not call this server from a browser. To allow it, start Kiwi with --cors-origin ${parseOrigin(origin) ?? origin}.`);
    }

    if (method === 'OPTIONS') {
      const requested = h['access-control-request-method'];
      if (origin === undefined || requested === undefined) return { kind: 'answer', status: 204, headers: { ...cors, allow: [...methods, 'OPTIONS'].join(', ') } };
      if (!methods.includes(requested.toUpperCase())) {
        return refuse(403, 'HTTP_ORIGIN_NOT_ALLOWED', 'method_not_allowed', vary, `Method ${requested} is not allowed from a browser; use ${methods.join(', ')}.`);
      }
      const headerNames = (h['access-control-request-headers'] ?? '').split(',').map((s) => s.trim().toLowerCase()).filter((s) => s !== '');
      const refused = headerNames.find((n) => !ALLOWED_HEADERS.includes(n) && !ALLOWED_HEADER_PREFIXES.some((p) => n.startsWith(p)));
      if (refused !== undefined) {
        return refuse(403, 'HTTP_ORIGIN_NOT_ALLOWED', 'header_not_allowed', vary, `Request header '${refused}' is not allowed from a browser; allowed: ${ALLOWED_HEADERS.join(', ')}, x-stainless-*.`);
      }
      return {
        kind: 'answer',
        status: 204,
        headers: {
          ...cors,
          'access-control-allow-methods': methods.join(', '),
          'access-control-allow-headers': [...new Set([...ALLOWED_HEADERS.slice(0, 2), ...headerNames])].join(', '),
          'access-control-max-age': String(PREFLIGHT_MAX_AGE_S),
          // Private Network Access: a public page allowed by --cors-origin calling a loopback server.
          ...(h['access-control-request-private-network'] === 'true' ? { 'access-control-allow-private-network': 'true' } : {}),
        },
      };
    }

    return { kind: 'pass', headers: origin === undefined ? cors : { ...cors, 'access-control-expose-headers': 'retry-after' } };
  };
}

/** node:http's headers as the guard (and the servers' routes) read them: a repeated header's values joined with ', '. */
export function flatHeaders(headers: IncomingHttpHeaders): Record<string, string | undefined> {
  const flat: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(headers)) flat[k] = Array.isArray(v) ? v.join(', ') : v;
  return flat;
}

function refuse(status: number, code: KiwiErrorCode, reason: string, headers: Record<string, string>, message: string): GuardDecision {
  return { kind: 'refuse', status, code, reason, message, headers };
}

/** A request carries a body when it declares a length above 0, a transfer coding, or a content type. */
function hasBody(req: GuardRequest): boolean {
  const m = req.method.toUpperCase();
  if (m === 'GET' || m === 'HEAD') return false;
  const h = req.headers;
  return h['transfer-encoding'] !== undefined || h['content-type'] !== undefined || (h['content-length'] !== undefined && h['content-length'].trim() !== '0');
}

/** application/json or any application/*+json (RFC 6839), parameters ignored. */
export function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  return type === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(type);
}

/** http(s)://localhost, 127.0.0.1 or [::1], any port: pages served from this machine. */
export function isLocalOrigin(origin: string): boolean {
  const parsed = parseOrigin(origin);
  if (parsed === null) return false;
  const u = new URL(parsed);
  return LOOPBACK_NAMES.includes(normalizeHostname(u.hostname));
}

/** The serialized origin (scheme://host[:port], lower case, default port dropped), or null if `origin` is not one. */
export function parseOrigin(origin: string): string | null {
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  // An Origin header is exactly scheme://host[:port]; anything more (path, user info) is not an origin.
  if (u.username !== '' || u.password !== '' || (u.pathname !== '/' && u.pathname !== '') || u.search !== '' || u.hash !== '') return null;
  if (!/^[a-z][a-z0-9+.-]*:\/\/[^/?#@]+\/?$/i.test(origin)) return null;
  return u.origin;
}

/** The host name of a Host header value ('example.com:8080', '[::1]:80'), lower case, no brackets or trailing dot; null if malformed. */
export function hostnameOf(hostHeader: string): string | null {
  const v = hostHeader.trim().toLowerCase();
  const m = /^\[([0-9a-f:.]+)\](?::(\d{1,5}))?$/.exec(v) ?? /^([^:[\]\s/@]+)(?::(\d{1,5}))?$/.exec(v);
  if (m === null || m[1] === undefined) return null;
  return normalizeHostname(m[1]);
}

function normalizeHostname(name: string): string {
  let n = name.trim().toLowerCase();
  if (n.startsWith('[') && n.endsWith(']')) n = n.slice(1, -1);
  return n.endsWith('.') ? n.slice(0, -1) : n;
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '';
}

/** Loopback listen addresses: the Host check then accepts only the loopback names and configured ones. */
export function isLoopbackAddress(host: string): boolean {
  const h = normalizeHostname(host);
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

function isIpLiteral(name: string): boolean {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(name) || (name.includes(':') && /^[0-9a-f:.]+$/.test(name));
}
