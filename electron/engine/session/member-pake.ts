// The member's side of a session's door: claims the nameplate on the rendezvous, sends its SPAKE2
// message (with the code, or for a rejoin with its resume secret), checks the host's reply and
// confirmation, confirms in turn and waits to be admitted. Every wait has a deadline.
import { KiwiError } from '../errors.js';
import { HOST_PEER } from '../rendezvous/protocol.js';
import type { RendezvousClient } from './rendezvous-client.js';
import { fromB64, PakeBody, parseBody, toB64 } from './session-messages.js';
import { startSessionPake, type PakeKey } from './session-params.js';
import type { Spake2Result } from './spake2.js';

/** Proves `key` to the host of `nameplate`; resolves with this connection's peer number and the exchange's result once admitted. */
export async function proveToHost(client: RendezvousClient, nameplate: number, memberId: string, key: PakeKey, timeoutMs: number): Promise<{ peer: number; result: Spake2Result }> {
  const rejoin = !('w' in key);
  const { peer } = await client.claim(nameplate, { rejoin });
  const pake = startSessionPake('A', nameplate, key);
  const admitted = waitForRendezvous(client, 'admitted', timeoutMs, 'admission');
  admitted.catch(() => undefined);
  const replyRaw = waitForRendezvous(client, 'from', timeoutMs, 'the host\'s key exchange reply');
  client.send(HOST_PEER, rejoin ? { kind: 'rejoin', memberId, msg: toB64(pake.message) } : { kind: 'pake', msg: toB64(pake.message) });
  const [from, raw] = await replyRaw;
  if (from !== HOST_PEER) throw new KiwiError('PAKE_UNEXPECTED', `Peer ${from} interfered with the key exchange.`);
  const reply = parseBody(PakeBody, raw);
  if (reply.kind !== 'pake-reply') throw new KiwiError('PAKE_UNEXPECTED', `The host sent '${reply.kind}' instead of its key exchange reply.`);
  const result = pake.finish(fromB64(reply.msg));
  result.verifyPeerConfirmation(fromB64(reply.confirm));
  client.send(HOST_PEER, { kind: 'confirm', confirm: toB64(result.confirmation) });
  await admitted;
  return { peer, result };
}

/** One event of the rendezvous connection: its arguments, or SESSION_TIMEOUT, RENDEZVOUS_CLOSED, or the server's error. */
function waitForRendezvous<K extends 'admitted' | 'from'>(client: RendezvousClient, event: K, timeoutMs: number, what: string): Promise<K extends 'from' ? [number, Record<string, unknown>] : []> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new KiwiError('SESSION_TIMEOUT', `Timed out waiting for ${what}. Is the host still running?`));
    }, timeoutMs);
    const onEvent = (...args: unknown[]): void => {
      cleanup();
      resolve(args as never);
    };
    const onClose = (reason: string): void => {
      cleanup();
      reject(new KiwiError('RENDEZVOUS_CLOSED', `The rendezvous closed the connection while waiting for ${what} (${reason}).`));
    };
    const onError = (err: KiwiError): void => {
      cleanup();
      reject(err);
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      client.off(event, onEvent as never);
      client.off('close', onClose);
      client.off('server-error', onError);
    };
    client.on(event, onEvent as never);
    client.on('close', onClose);
    client.on('server-error', onError);
  });
}
