// The rendezvous as a WebSocket server (`kiwi rendezvous`, or embedded in the host): the socket
// adapter around RendezvousCore. Listens on loopback unless told otherwise.
import { startWsServer } from '../transport/ws.js';
import { RendezvousCore, type RendezvousCoreOptions } from './rendezvous-core.js';

export interface RendezvousOptions extends RendezvousCoreOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
}

export interface Rendezvous {
  readonly url: string;
  readonly port: number;
  readonly core: RendezvousCore;
  close(): Promise<void>;
}

export async function startRendezvous(opts: RendezvousOptions = {}): Promise<Rendezvous> {
  const core = new RendezvousCore(opts);
  const server = await startWsServer({
    host: opts.host ?? '127.0.0.1',
    port: opts.port ?? 0,
    // ws closes (1009) any message above this before buffering it; text is checked tighter by the core.
    maxPayloadBytes: Math.max(core.limits.maxRelayBytes, core.limits.maxTextBytes),
    onConnection: (conn) => {
      core.connected(conn);
      conn.onText((text) => core.text(conn, text));
      conn.onBinary((bytes) => core.binary(conn, bytes));
      conn.onClose(() => core.disconnected(conn));
    },
  });
  return { url: server.url, port: server.port, core, close: () => server.close() };
}
