// The STUN/TURN servers a member hands its ICE links (ice-link.ts), from `--stun` and `--turn`:
// comma-separated URLs as libdatachannel takes them, 'stun:HOST:PORT' and
// 'turn:USER:PASSWORD@HOST:PORT' (optionally '?transport=tcp'). Checked here, where they enter.
import { KiwiError } from '../errors.js';

const MAX_SERVERS = 8;
const MAX_URL_CHARS = 256;
const STUN = /^stuns?:(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$/;
const TURN = /^turns?:[^\s,@]+:[^\s,@]+@(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?(\?transport=(udp|tcp))?$/;

export function parseIceServers(stun: string | undefined, turn: string | undefined): string[] {
  const split = (s: string | undefined): string[] => (s ?? '').split(',').map((u) => u.trim()).filter((u) => u !== '');
  const stuns = split(stun);
  const turns = split(turn);
  for (const u of stuns) {
    if (u.length > MAX_URL_CHARS || !STUN.test(u)) throw new KiwiError('USAGE', `--stun takes stun:HOST:PORT URLs, comma-separated; '${u.slice(0, 80)}' is not one.`);
  }
  for (const u of turns) {
    // The password is not echoed back.
    if (u.length > MAX_URL_CHARS || !TURN.test(u)) throw new KiwiError('USAGE', '--turn takes turn:USER:PASSWORD@HOST:PORT URLs, comma-separated; one of them is not one.');
  }
  const all = [...stuns, ...turns];
  if (all.length > MAX_SERVERS) throw new KiwiError('USAGE', `At most ${MAX_SERVERS} STUN and TURN servers together.`);
  return all;
}

/**
 * The rendezvous's own STUN service (rendezvous/stun-server.ts: UDP at its WebSocket's port
 * number) as an ICE server URL; undefined for a URL that names no host and port.
 */
export function rendezvousStun(rendezvousUrl: string): string | undefined {
  let url: URL;
  try {
    url = new URL(rendezvousUrl);
  } catch {
    return undefined;
  }
  if (url.hostname === '' || !/^wss?:$/.test(url.protocol)) return undefined;
  const port = url.port !== '' ? url.port : url.protocol === 'wss:' ? '443' : '80';
  return `stun:${url.hostname}:${port}`;
}
