// The rendezvous as a WebSocket server (`kiwi rendezvous`, or embedded in the host): the socket
// adapter around RendezvousCore. Listens on loopback unless told otherwise. Socket-level bounds
// live here (the core bounds messages): connections at most in all and per address, a connection
// that says nothing after connecting is closed, and an optional idle timeout.
import { KiwiError } from '../errors.js';
import { startWsServer, type WsConnection } from '../transport/ws.js';
import { RendezvousCore, type RendezvousCoreOptions } from './rendezvous-core.js';
import { startStunServer, type StunServer } from './stun-server.js';

export interface RendezvousOptions extends RendezvousCoreOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Connections at once; more are closed at once (1013). Default 1024. */
  maxConnections?: number;
  /** Connections at once from one remote address. Default 64. */
  maxConnectionsPerAddress?: number;
  /** A connection that sends no message this long after connecting is closed (1008). Default 30 s. */
  helloTimeoutMs?: number;
  /**
   * A connection that receives no message from its client this long is closed (1008). Default 0:
   * off, since a host waiting for its friends legitimately says nothing for hours and the protocol
   * has no keep-alive.
   */
  idleTimeoutMs?: number;
  /** A STUN service (stun-server.ts) on UDP at the WebSocket's port number; default on. */
  stun?: boolean;
  /** Two of the addresses it listens on (host 0.0.0.0): the STUN service names each as the other's OTHER-ADDRESS (RFC 5780). */
  stunAddressPair?: readonly [string, string];
  /** The second STUN port (0 or unset: any free one); a public server names it to open it in its firewall. */
  stunSecondPort?: number;
}

export interface Rendezvous {
  readonly url: string;
  readonly port: number;
  readonly core: RendezvousCore;
  /** Connections open now. */
  readonly connections: number;
  /** The UDP port of its STUN service (the WebSocket's port number), undefined when off or that UDP port was taken. */
  readonly stunPort: number | undefined;
  close(): Promise<void>;
}

/** WebSocket close codes (RFC 6455 section 7.4.1): 1008 policy violation, 1013 try again later. */
export const SocketCloseCode = { SILENT: 1008, FULL: 1013 } as const;

export async function startRendezvous(opts: RendezvousOptions = {}): Promise<Rendezvous> {
  const core = new RendezvousCore(opts);
  const maxConnections = opts.maxConnections ?? 1024;
  const maxPerAddress = opts.maxConnectionsPerAddress ?? 64;
  const helloMs = opts.helloTimeoutMs ?? 30_000;
  const idleMs = opts.idleTimeoutMs ?? 0;
  const open = new Set<WsConnection>();
  const byAddress = new Map<string, number>();

  const server = await startWsServer({
    host: opts.host ?? '127.0.0.1',
    port: opts.port ?? 0,
    // ws closes (1009) any message above this before buffering it; text is checked tighter by the core.
    maxPayloadBytes: Math.max(core.limits.maxRelayBytes, core.limits.maxTextBytes),
    onConnection: (conn) => {
      const address = conn.remoteAddress;
      const fromAddress = byAddress.get(address) ?? 0;
      if (open.size >= maxConnections || fromAddress >= maxPerAddress) {
        conn.close(SocketCloseCode.FULL, open.size >= maxConnections ? 'the rendezvous is full' : 'too many connections from this address');
        return;
      }
      open.add(conn);
      byAddress.set(address, fromAddress + 1);
      // Until the first message the hello timer runs; after it, the idle timer (if any).
      let heard = false;
      let timer: NodeJS.Timeout | undefined = setTimeout(() => conn.close(SocketCloseCode.SILENT, `no message within ${helloMs} ms`), helloMs);
      const activity = (): void => {
        if (heard && idleMs <= 0) return;
        heard = true;
        clearTimeout(timer);
        timer = idleMs > 0 ? setTimeout(() => conn.close(SocketCloseCode.SILENT, `idle for ${idleMs} ms`), idleMs) : undefined;
      };
      core.connected(conn);
      conn.onText((text) => {
        activity();
        core.text(conn, text);
      });
      conn.onBinary((bytes) => {
        activity();
        core.binary(conn, bytes);
      });
      conn.onClose(() => {
        clearTimeout(timer);
        open.delete(conn);
        const left = (byAddress.get(address) ?? 1) - 1;
        if (left <= 0) byAddress.delete(address);
        else byAddress.set(address, left);
        core.disconnected(conn);
      });
    },
  });
  let stun: StunServer | undefined;
  let stunOther: StunServer | undefined;
  if (opts.stun !== false) {
    const pair = opts.stunAddressPair !== undefined ? { addressPair: opts.stunAddressPair } : {};
    // Beside the WebSocket on the same port number; a UDP port someone else holds only costs
    // members their server-reflexive candidates from here, not the rendezvous. A second one on
    // another port lets members tell how their NAT maps (each names the other as OTHER-ADDRESS).
    stun = await startStunServer({ host: opts.host ?? '127.0.0.1', port: server.port, otherPort: () => stunOther?.port, ...pair }).catch(() => undefined);
    const secondPort = opts.stunSecondPort ?? 0;
    if (stun !== undefined) {
      const second = await startStunServer({ host: opts.host ?? '127.0.0.1', port: secondPort, otherPort: () => stun?.port, ...pair }).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
      if (!(second instanceof Error)) stunOther = second;
      else if (secondPort !== 0) {
        // A port the owner chose and cannot have is an error to fix, not a quiet loss of NAT tests.
        await stun.close();
        await server.close();
        throw new KiwiError('USAGE', `The second STUN port ${secondPort} (UDP) is taken or not allowed (${second.message}); choose another with --stun-second-port.`);
      }
    }
  }
  return {
    url: server.url,
    port: server.port,
    stunPort: stun?.port,
    core,
    get connections() {
      return open.size;
    },
    close: async () => {
      await stun?.close();
      await stunOther?.close();
      await server.close();
    },
  };
}
