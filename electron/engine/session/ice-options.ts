// The ICE settings a session's LinkManager gets, the same on host and member: none for a relay-only
// node (no listenHost) or with --no-ice, otherwise the rendezvous's own STUN service first, then
// the servers the user named.
import { rendezvousStun } from '../transport/ice-servers.js';

/**
 * ICE (WebRTC data channel) ring links, tried before WebSocket and relay; on by default (with host
 * candidates only) whenever direct links are (listenHost set); `false` turns them off (`--no-ice`).
 * iceServers: 'stun:host:port', 'turn:user:pass@host:port'.
 */
export type IceOption = false | { iceServers?: readonly string[]; timeoutMs?: number };

export function ringIceOptions(rendezvousUrl: string, ice: IceOption | undefined, listenHost: string | undefined): { iceServers: string[]; timeoutMs?: number } | undefined {
  if (ice === false || listenHost === undefined) return undefined;
  const rvStun = rendezvousStun(rendezvousUrl);
  return { iceServers: [...(rvStun !== undefined ? [rvStun] : []), ...(ice?.iceServers ?? [])], ...(ice?.timeoutMs !== undefined ? { timeoutMs: ice.timeoutMs } : {}) };
}
