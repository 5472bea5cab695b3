// The addresses a listener is reachable at: a wildcard bind (0.0.0.0, ::) is not an address
// others can dial, so it is expanded to this machine's interface addresses (IPv4, LAN first,
// loopback last for peers on the same machine).
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';

export function reachableHosts(bindHost: string, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces()): string[] {
  if (bindHost !== '0.0.0.0' && bindHost !== '::' && bindHost !== '') return [bindHost];
  const external: string[] = [];
  const loopback: string[] = [];
  for (const list of Object.values(interfaces)) {
    for (const info of list ?? []) {
      if (info.family !== 'IPv4') continue;
      (info.internal ? loopback : external).push(info.address);
    }
  }
  return [...external, ...(loopback.length > 0 ? loopback : ['127.0.0.1'])];
}

export function wsUrls(bindHost: string, port: number, interfaces?: NodeJS.Dict<NetworkInterfaceInfo[]>): string[] {
  return reachableHosts(bindHost, interfaces).map((h) => `ws://${h.includes(':') ? `[${h}]` : h}:${port}`);
}
