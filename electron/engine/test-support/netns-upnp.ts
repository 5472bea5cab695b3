// A UPnP-IGD and NAT-PMP daemon (miniupnpd, nftables backend) on a router of netns-nat.ts, for
// port-mapping tests. miniupnpd refuses to map behind a private WAN address, so the router gets a
// public-looking one (11.79.i.2, routed to it from the public namespace) that it reports as its
// external IP. The router must be built with `portMapping: true` so its forward chain lets the
// daemon's DNATs through. Needs root, nftables and /usr/sbin/miniupnpd.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatLab } from './netns-nat.js';

export const MINIUPNPD = '/usr/sbin/miniupnpd';

export interface Miniupnpd {
  /** The router's external (public) address the daemon reports. */
  external: string;
  /** The daemon's DNAT rules now (its nftables chain, as text). */
  natRules(): string;
  stop(): void;
}

const TABLE = 'kiwi_upnp';

/** Starts miniupnpd on router `i` (1-based) of `lab` built with `tag`; resolves once it serves SSDP, HTTP and NAT-PMP. */
export async function startMiniupnpd(lab: NatLab, i: number, tag: string): Promise<Miniupnpd> {
  if (!existsSync(MINIUPNPD)) throw new Error(`${MINIUPNPD} is missing (apt-get install miniupnpd-nftables)`);
  const ns = `kiwi-nat${i}-${tag}`;
  const wan = `k${tag}w${i}`;
  const external = `11.79.${i}.2`;
  const inNs = (n: string, args: string[], input?: string): string => execFileSync('ip', ['netns', 'exec', n, ...args], { input, stdio: ['pipe', 'pipe', 'pipe'] }).toString();
  inNs(ns, ['ip', 'addr', 'add', `${external}/32`, 'dev', wan]);
  inNs(lab.pub, ['ip', 'route', 'add', `${external}/32`, 'via', `10.79.${i}.2`]);
  inNs(ns, ['nft', '-f', '-'], `table inet ${TABLE} {
  chain forward { type filter hook forward priority 0; policy accept; jump miniupnpd; }
  chain miniupnpd {}
  chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
  chain prerouting_miniupnpd {}
  chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
  chain postrouting_miniupnpd {}
}
`);
  const dir = mkdtempSync(join(tmpdir(), 'kiwi-upnp-'));
  const conf = join(dir, 'miniupnpd.conf');
  writeFileSync(conf, [
    `ext_ifname=${wan}`, `ext_ip=${external}`, 'listening_ip=br0', 'http_port=0', 'enable_natpmp=yes', 'enable_upnp=yes',
    'secure_mode=yes', 'system_uptime=no', `uuid=4ad8c7d0-1f2e-4b5a-9c3d-0000000000${String(i).padStart(2, '0')}`,
    `upnp_table_name=${TABLE}`, `upnp_nat_table_name=${TABLE}`, 'upnp_forward_chain=miniupnpd',
    'upnp_nat_chain=prerouting_miniupnpd', 'upnp_nat_postrouting_chain=postrouting_miniupnpd',
    'allow 1024-65535 192.168.0.0/16 1024-65535', 'deny 0-65535 0.0.0.0/0 0-65535', '',
  ].join('\n'));
  const child: ChildProcess = spawn('ip', ['netns', 'exec', ns, MINIUPNPD, '-d', '-4', '-f', conf, '-P', join(dir, 'pid')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  try {
    await new Promise<void>((resolve, reject) => {
      child.stderr?.on('data', (d: Buffer) => {
        log += d.toString();
        if (/HTTP listening on port/.test(log) && /NAT-PMP|PCP/i.test(log)) resolve();
      });
      child.once('exit', (code) => reject(new Error(`miniupnpd exited (${code}): ${log}`)));
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    external,
    natRules: () => inNs(ns, ['nft', 'list', 'chain', 'inet', TABLE, 'prerouting_miniupnpd']),
    stop: () => {
      child.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
