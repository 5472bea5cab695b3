// The rendezvous server's socket bounds on real sockets: silent connections are closed, idle ones
// when asked, and connections beyond the caps (in all, per address) are turned away at once.
import { afterEach, describe, expect, it } from 'vitest';
import { RendezvousClient } from '../session/rendezvous-client.js';
import { connectWs, type WsConnection } from '../transport/ws.js';
import { SocketCloseCode, startRendezvous, type Rendezvous, type RendezvousOptions } from './server.js';

let rv: Rendezvous | undefined;
const clients: Array<{ close(): void }> = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await rv?.close();
  rv = undefined;
});

async function start(opts: RendezvousOptions): Promise<Rendezvous> {
  rv = await startRendezvous(opts);
  return rv;
}

async function raw(url: string): Promise<{ conn: WsConnection; closed: Promise<{ code: number; reason: string }> }> {
  const conn = await connectWs(url, { maxPayloadBytes: 1 << 20 });
  clients.push(conn);
  const closed = new Promise<{ code: number; reason: string }>((resolve) => conn.onClose((code, reason) => resolve({ code, reason })));
  return { conn, closed };
}

describe('rendezvous socket bounds', () => {
  it('closes a connection that sends nothing, and keeps one that spoke', async () => {
    const r = await start({ helloTimeoutMs: 300 });
    const host = await RendezvousClient.connect(r.url);
    clients.push(host);
    await host.open();
    // Connected after the host: when its timer has fired, the host's would have too.
    const silent = await raw(r.url);
    expect(await silent.closed).toMatchObject({ code: SocketCloseCode.SILENT, reason: expect.stringMatching(/no message/) });
    // The server forgets the silent one when its side of the close completes.
    while (r.connections > 1) await new Promise((resolve) => setImmediate(resolve));
    expect(r.connections).toBe(1);
  });

  it('closes a connection idle past idleTimeoutMs when one is set', async () => {
    const r = await start({ helloTimeoutMs: 60_000, idleTimeoutMs: 300 });
    const c = await raw(r.url);
    c.conn.sendText(JSON.stringify({ t: 'open', v: 1 }));
    expect(await c.closed).toMatchObject({ code: SocketCloseCode.SILENT, reason: expect.stringMatching(/idle/) });
  });

  it('turns away connections beyond the per-address cap, and takes new ones when some leave', async () => {
    const r = await start({ maxConnectionsPerAddress: 2 });
    const a = await raw(r.url);
    await raw(r.url);
    const third = await raw(r.url);
    expect(await third.closed).toMatchObject({ code: SocketCloseCode.FULL, reason: expect.stringMatching(/this address/) });
    a.conn.close();
    await a.closed;
    while (r.connections > 1) await new Promise((resolve) => setImmediate(resolve));
    const again = await raw(r.url);
    again.conn.sendText(JSON.stringify({ t: 'open', v: 1 }));
    expect(r.connections).toBe(2);
  });

  it('turns away connections beyond the total cap', async () => {
    const r = await start({ maxConnections: 1 });
    await raw(r.url);
    const second = await raw(r.url);
    expect(await second.closed).toMatchObject({ code: SocketCloseCode.FULL, reason: expect.stringMatching(/full/) });
  });
});
