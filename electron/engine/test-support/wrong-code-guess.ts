// One online guess of a session code, as a stranger at the rendezvous would make it: claim the
// nameplate, send the key exchange's first message for password scalar `w`, and if the host
// answers, a confirmation that cannot be right. The tests count what the host allows.
import { HOST_PEER } from '../rendezvous/protocol.js';
import { pakeAad, PAKE_ID_HOST, PAKE_ID_MEMBER } from '../session/host.js';
import { RendezvousClient } from '../session/rendezvous-client.js';
import { spake2Start } from '../session/spake2.js';

/** 'answered': the host took part in the exchange; 'refused': it closed the claim first. */
export async function wrongCodeGuess(url: string, nameplate: number, w: bigint): Promise<'answered' | 'refused'> {
  const c = await RendezvousClient.connect(url);
  const closed = new Promise<void>((resolve) => c.once('close', () => resolve()));
  c.on('server-error', () => undefined);
  await c.claim(nameplate);
  const pake = spake2Start({ role: 'A', w, idA: PAKE_ID_MEMBER, idB: PAKE_ID_HOST, aad: pakeAad(nameplate) });
  const reply = new Promise<'answered' | 'refused'>((resolve) => {
    c.once('from', () => resolve('answered'));
    void closed.then(() => resolve('refused'));
  });
  c.send(HOST_PEER, { kind: 'pake', msg: Buffer.from(pake.message).toString('base64') });
  const got = await reply;
  if (got === 'answered') c.send(HOST_PEER, { kind: 'confirm', confirm: Buffer.alloc(32).toString('base64') });
  // The host rejects the wrong confirmation (or the refused claim): the rendezvous closes the connection.
  await closed;
  return got;
}
