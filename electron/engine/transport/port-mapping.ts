// Port mapping on the home router (issue 19): where the router offers UPnP-IGD (v2) or NAT-PMP, a
// member maps the TCP port of its direct-link (WebSocket) listener on it and advertises the mapped
// public address too, so a member in another home can dial it directly instead of relaying. The
// protocols come from @achingbrain/nat-port-mapper (libp2p's); this module owns that dependency.
// Discovery runs both protocols at once with a short timeout (UPnP preferred when both answer);
// a lease is renewed at half its length; close() removes the mapping. Nothing here ever fails a
// join: a router without either protocol just means no mapping (NODE_DEBUG=kiwi-port-mapping
// shows why).
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { debuglog } from 'node:util';
import { pmpNat, upnpNat, type Gateway } from '@achingbrain/nat-port-mapper';

export type PortMappingProtocol = 'upnp' | 'nat-pmp';

export interface PortMapperOptions {
  /** How long to look for a gateway (ms); default 1500. */
  discoverMs?: number;
  /** Lease asked for (s); default 3600 (UPnP's library never asks for less than 3600). */
  leaseS?: number;
  /** Which protocols to try; default both. */
  protocols?: readonly PortMappingProtocol[];
  /** NAT-PMP's gateway; default the IPv4 default route's (Linux), else NAT-PMP is not tried. */
  pmpGateway?: string;
  /** After each lease renewal that succeeded. */
  onRenewed?: (m: MappedPort) => void;
}

export interface MappedPort {
  protocol: PortMappingProtocol;
  internal: { host: string; port: number };
  external: { host: string; port: number };
  /** Lease renewals that succeeded so far. */
  renewals: number;
}

const log = debuglog('kiwi-port-mapping');
const REQUEST_MS = 5000;

/** The IPv4 default gateway from /proc/net/route; undefined elsewhere or without one. */
export function defaultGateway4(routeTable?: string): string | undefined {
  let text = routeTable;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/net/route', 'utf8');
    } catch {
      return undefined;
    }
  }
  for (const line of text.split('\n').slice(1)) {
    const [, dest, gw] = line.trim().split(/\s+/);
    if (dest !== '00000000' || gw === undefined || !/^[0-9A-F]{8}$/i.test(gw) || gw === '00000000') continue;
    const n = Number.parseInt(gw, 16);
    return [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, n >>> 24].join('.');
  }
  return undefined;
}

const toInt = (a: string): number => a.split('.').reduce((n, o) => (n << 8) + Number(o), 0) >>> 0;

/** This machine's IPv4 address on the gateway's subnet (the one the router forwards to). */
export function localAddressFor(gateway: string, interfaces = networkInterfaces()): string | undefined {
  for (const list of Object.values(interfaces)) {
    for (const i of list ?? []) {
      if (i.family !== 'IPv4' || i.internal) continue;
      const mask = toInt(i.netmask);
      if (((toInt(i.address) ^ toInt(gateway)) & mask) === 0) return i.address;
    }
  }
  return undefined;
}

const reason = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * One member's port mapping. start() begins discovery (call it early: it runs beside the join's
 * handshake); map() waits for it and maps one port (a new port replaces the old mapping);
 * close() unmaps and stops. Every method resolves; none throws.
 */
export class PortMapper {
  private found: Promise<{ gateway: Gateway; protocol: PortMappingProtocol } | undefined> | undefined;
  private mapped: MappedPort | undefined;
  private renew: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly opts: PortMapperOptions = {}) {}

  /** The protocol that mapped the current port, or null. */
  get protocol(): PortMappingProtocol | null {
    return this.mapped?.protocol ?? null;
  }

  get mapping(): MappedPort | undefined {
    return this.mapped;
  }

  start(): void {
    this.found ??= this.discover();
  }

  private async discover(): Promise<{ gateway: Gateway; protocol: PortMappingProtocol } | undefined> {
    const protocols = this.opts.protocols ?? ['upnp', 'nat-pmp'];
    const ms = this.opts.discoverMs ?? 1500;
    const upnp = protocols.includes('upnp') ? this.findUpnp(ms) : Promise.resolve(undefined);
    const pmp = protocols.includes('nat-pmp') ? this.findPmp(ms) : Promise.resolve(undefined);
    const [u, p] = await Promise.all([upnp, pmp]);
    if (u !== undefined && p !== undefined) await p.stop().catch(() => undefined);
    const pick = u !== undefined ? { gateway: u, protocol: 'upnp' as const } : p !== undefined ? { gateway: p, protocol: 'nat-pmp' as const } : undefined;
    log(pick === undefined ? 'no UPnP-IGD or NAT-PMP gateway answered' : `found a ${pick.protocol} gateway at ${pick.gateway.host}`);
    return pick;
  }

  private async findUpnp(ms: number): Promise<Gateway | undefined> {
    try {
      for await (const gw of upnpNat({ autoRefresh: false }).findGateways({ signal: AbortSignal.timeout(ms) })) {
        if (gw.family === 'IPv4') return gw;
      }
    } catch (err) {
      log(`UPnP discovery: ${reason(err)}`);
    }
    return undefined;
  }

  private async findPmp(ms: number): Promise<Gateway | undefined> {
    const host = this.opts.pmpGateway ?? defaultGateway4();
    if (host === undefined) return undefined;
    let gw: Gateway | undefined;
    try {
      gw = pmpNat(host, { autoRefresh: false });
      await gw.externalIp({ signal: AbortSignal.timeout(ms) });
      return gw;
    } catch (err) {
      log(`NAT-PMP at ${host}: ${reason(err)}`);
      await gw?.stop().catch(() => undefined);
      return undefined;
    }
  }

  /** Maps `port` (TCP) of a listener bound to `bindHost`; undefined when no gateway maps it. */
  async map(port: number, bindHost = '0.0.0.0'): Promise<MappedPort | undefined> {
    this.start();
    const found = await this.found;
    if (found === undefined || this.closed) return undefined;
    if (this.mapped?.internal.port === port) return this.mapped;
    await this.unmap(found.gateway);
    const wildcard = bindHost === '0.0.0.0' || bindHost === '::' || bindHost === '';
    const host = wildcard ? localAddressFor(found.gateway.host) : bindHost;
    if (host === undefined || host.startsWith('127.')) return undefined;
    const leaseS = this.opts.leaseS ?? 3600;
    const request = async (): Promise<MappedPort> => {
      const m = await found.gateway.map(port, host, {
        protocol: 'tcp', externalPort: port, autoRefresh: false, description: 'kiwi ring link',
        // NAT-PMP's client sends `ttl` as seconds; UPnP's takes ms.
        ttl: found.protocol === 'nat-pmp' ? leaseS : leaseS * 1000,
        signal: AbortSignal.timeout(REQUEST_MS),
      });
      return { protocol: found.protocol, internal: { host, port }, external: { host: m.externalHost, port: m.externalPort }, renewals: 0 };
    };
    try {
      this.mapped = await request();
    } catch (err) {
      log(`${found.protocol} mapping of ${host}:${port}: ${reason(err)}`);
      return undefined;
    }
    log(`mapped ${host}:${port} to ${this.mapped.external.host}:${this.mapped.external.port} (${found.protocol})`);
    const effectiveS = found.protocol === 'upnp' ? Math.max(leaseS, 3600) : leaseS;
    this.renew = setInterval(() => {
      request().then(
        () => {
          if (this.mapped === undefined) return;
          this.mapped.renewals += 1;
          this.opts.onRenewed?.(this.mapped);
        },
        (err: unknown) => log(`renewing ${host}:${port}: ${reason(err)}`),
      );
    }, (effectiveS * 1000) / 2);
    this.renew.unref();
    return this.mapped;
  }

  private async unmap(gateway: Gateway): Promise<void> {
    clearInterval(this.renew);
    const m = this.mapped;
    this.mapped = undefined;
    if (m === undefined) return;
    await gateway.unmap(m.internal.port, { signal: AbortSignal.timeout(REQUEST_MS) }).catch((err: unknown) => log(`unmapping ${m.internal.port}: ${reason(err)}`));
  }

  /** Removes the mapping and stops talking to the gateway. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const found = await this.found;
    if (found === undefined) return;
    await this.unmap(found.gateway);
    await found.gateway.stop({ signal: AbortSignal.timeout(REQUEST_MS) }).catch(() => undefined);
  }
}

/** The ws:// URL a mapping advertises. */
export const mappedUrl = (m: MappedPort): string => `ws://${m.external.host}:${m.external.port}`;

const loopbackUrl = (u: string): boolean => /^wss?:\/\/(127\.|\[::1\]|localhost)/.test(u);

/**
 * A member's mapper (session/member.ts): none when mapping is off (`kiwi join --no-port-mapping`),
 * there is no direct listener, it listens on loopback only, or its addresses are given (--advertise).
 */
export function memberPortMapper(opts: { listenHost?: string; advertise?: readonly string[]; portMapping?: boolean | PortMapperOptions }): PortMapper | undefined {
  const { listenHost, advertise, portMapping } = opts;
  if (portMapping === false || listenHost === undefined || advertise !== undefined) return undefined;
  if (listenHost.startsWith('127.') || listenHost === '::1' || listenHost === 'localhost') return undefined;
  return new PortMapper(portMapping === true || portMapping === undefined ? {} : portMapping);
}

/** The listener's addresses with the mapped one added before the loopback ones (the listener's port mapped now, or kept). */
export async function withMappedAddress(mapper: PortMapper | undefined, listening: readonly string[], listenHost = '0.0.0.0'): Promise<string[]> {
  const first = listening[0];
  if (mapper === undefined || first === undefined) return [...listening];
  const m = await mapper.map(Number(new URL(first).port), listenHost);
  if (m === undefined) return [...listening];
  const url = mappedUrl(m);
  const rest = listening.filter((u) => u !== url);
  return [...rest.filter((u) => !loopbackUrl(u)), url, ...rest.filter(loopbackUrl)].slice(0, 8);
}
