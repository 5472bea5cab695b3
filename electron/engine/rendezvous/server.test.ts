import { afterEach, describe, expect, it } from 'vitest';
import { RelayChannel } from './protocol.js';
import { startRendezvous, type Rendezvous } from './server.js';
import { RendezvousClient } from '../session/rendezvous-client.js';
import { describeLinkCompliance } from '../test-support/link-compliance.js';
import { connectWs } from '../transport/ws.js';

async function sessionOnRendezvous(rv: Rendezvous): Promise<{ host: RendezvousClient; member: RendezvousClient; nameplate: number }> {
  const host = await RendezvousClient.connect(rv.url);
  const { nameplate } = await host.open();
  const member = await RendezvousClient.connect(rv.url);
  const admitted = new Promise<void>((resolve) => member.once('admitted', resolve));
  const { peer } = await member.claim(nameplate);
  host.admit(peer);
  await admitted;
  return { host, member, nameplate };
}

describeLinkCompliance('relayed', async () => {
  const relayView: Uint8Array[] = [];
  const rv = await startRendezvous({ onRelay: (_from, _to, payload) => relayView.push(payload.slice()) });
  const { host, member } = await sessionOnRendezvous(rv);
  return {
    a: member.relayLink(0, RelayChannel.DATA),
    b: host.relayLink(1, RelayChannel.DATA),
    wire: [],
    relayView,
    cleanup: async () => {
      member.close();
      host.close();
      await rv.close();
    },
  };
});

describe('rendezvous server', () => {
  let rv: Rendezvous | undefined;
  afterEach(async () => {
    await rv?.close();
    rv = undefined;
  });

  it('closes only the connection that sends an oversized message; other sessions keep relaying', async () => {
    rv = await startRendezvous({ limits: { maxRelayBytes: 64 * 1024 } });
    const { host, member } = await sessionOnRendezvous(rv);
    const attacker = await connectWs(rv.url, { maxPayloadBytes: 1 << 20 });
    const attackerClosed = new Promise<number>((resolve) => attacker.onClose((code) => resolve(code)));
    attacker.sendBinary(new Uint8Array(200 * 1024));
    expect(await attackerClosed).toBe(1009);
    const got = new Promise<Uint8Array>((resolve) => host.relayLink(1, RelayChannel.DATA).onData(resolve));
    member.relayLink(0, RelayChannel.DATA).send(Uint8Array.of(4, 2));
    expect([...(await got)]).toEqual([4, 2]);
    member.close();
    host.close();
  });

  it('answers malformed JSON with an error message and stays up', async () => {
    rv = await startRendezvous();
    const conn = await connectWs(rv.url, { maxPayloadBytes: 1 << 20 });
    const reply = new Promise<string>((resolve) => conn.onText(resolve));
    conn.sendText('{"t":"claim","v":1,"nameplate":"42"}');
    expect(JSON.parse(await reply)).toMatchObject({ t: 'error', code: 'RENDEZVOUS_MALFORMED' });
    const host = await RendezvousClient.connect(rv.url);
    expect((await host.open()).nameplate).toBeGreaterThan(0);
    host.close();
    conn.close();
  });

  it('refuses a claim of an unknown nameplate with a clear error', async () => {
    rv = await startRendezvous();
    const member = await RendezvousClient.connect(rv.url);
    await expect(member.claim(4242)).rejects.toMatchObject({ code: 'NAMEPLATE_UNKNOWN' });
    member.close();
  });
});
