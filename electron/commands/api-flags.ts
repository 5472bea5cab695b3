// The API's browser-facing flags shared by `kiwi serve` and `kiwi host` (--cors-origin,
// --allowed-host), validated at entry, and the warning printed when the API is reachable from
// the network without a key.
import { KiwiError } from '../engine/errors.js';
import { hostnameOf, isLoopbackAddress, parseOrigin } from '../engine/server/http-guard.js';
import type { CommandContext, OptionSpec } from './command.js';
import type { EventPrinter } from './session-io.js';

export const API_BROWSER_OPTIONS: Record<string, OptionSpec> = {
  'cors-origin': {
    type: 'string', valueName: 'ORIGIN', multiple: true,
    description: 'Let web pages from ORIGIN (e.g. https://chat.example) call the API from a browser (repeatable; * for any). Pages on http://localhost, 127.0.0.1 and [::1] always may',
  },
  'allowed-host': {
    type: 'string', valueName: 'NAME', multiple: true,
    description: 'Also accept requests addressed to NAME (the Host header), e.g. a LAN name (repeatable; * for any). localhost, 127.0.0.1 and [::1] always work',
  },
};

export interface ApiBrowserPolicy {
  corsOrigins: string[];
  allowedHosts: string[];
}

function list(ctx: CommandContext, name: string): string[] {
  const v = ctx.values[name];
  if (v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).filter((x): x is string => typeof x === 'string');
}

export function apiBrowserPolicy(ctx: CommandContext): ApiBrowserPolicy {
  const corsOrigins = list(ctx, 'cors-origin').map((o) => {
    if (o === '*') return o;
    const origin = parseOrigin(o.replace(/\/$/, ''));
    if (origin === null) throw new KiwiError('USAGE', `--cors-origin must be an origin like https://chat.example or http://localhost:3000 (scheme, host and port only) or *, got '${o}'`);
    return origin;
  });
  const allowedHosts = list(ctx, 'allowed-host').map((h) => {
    if (h === '*') return h;
    const name = hostnameOf(h);
    if (name === null || h.includes(':') && !h.startsWith('[')) throw new KiwiError('USAGE', `--allowed-host takes a host name without port, like kiwi.lan, or *; got '${h}'`);
    return name;
  });
  return { corsOrigins, allowedHosts };
}

/** Warns (a `warning` event, and a line on stderr) when the API listens beyond loopback without an API key. */
export function warnIfUnprotected(print: EventPrinter, stderr: NodeJS.WritableStream, command: string, listenHost: string, apiKey: string | undefined): void {
  if (apiKey !== undefined || isLoopbackAddress(listenHost)) return;
  const message = `the API listens on ${listenHost} without --api-key; anyone on the network can use the model. Set --api-key KEY (or KIWI_API_KEY).`;
  print('warning', { code: 'API_UNPROTECTED', message }, `warning: ${message}`);
  stderr.write(`kiwi ${command}: warning: ${message}\n`);
}
