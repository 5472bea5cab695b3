// The rendezvous's STUN service (RFC 8489 Binding) on UDP beside its WebSocket port, so members
// learn their public address (a server-reflexive ICE candidate) without a third-party server.
// Each datagram is parsed with every length checked (stun-message.ts); only Binding requests are
// answered, with XOR-MAPPED-ADDRESS; anything else is dropped. A response is no larger than its
// request plus a fixed 40 bytes, so the service amplifies nothing worth having.
import { createSocket, type Socket } from 'node:dgram';
import { networkInterfaces } from 'node:os';
import { isKiwiError, KiwiError } from '../errors.js';
import { BINDING, encodeStun, parseStun, plainAddress, StunAttr, StunClass, unknownRequired, xorMappedAddress } from './stun-message.js';

export interface StunServer {
  readonly port: number;
  /** Binding requests answered so far. */
  readonly answered: number;
  close(): Promise<void>;
}

const SOFTWARE = new TextEncoder().encode('kiwi rendezvous');

/**
 * The answer to one datagram from `address:port`, or undefined to drop it. `other`: where this
 * server also answers (OTHER-ADDRESS, RFC 5780), so a client can tell how its NAT maps (stun-nat.ts).
 */
export function answerStun(datagram: Uint8Array, address: string, port: number, other?: { address: string; port: number }): Uint8Array | undefined {
  let msg;
  try {
    msg = parseStun(datagram);
  } catch (err) {
    if (isKiwiError(err, 'STUN_MALFORMED')) return undefined;
    throw err;
  }
  if (msg.method !== BINDING || msg.cls !== StunClass.REQUEST) return undefined;
  const unknown = unknownRequired(msg).slice(0, 8);
  if (unknown.length > 0) {
    const reason = new TextEncoder().encode('Unknown Attribute');
    const errorCode = new Uint8Array(4 + reason.length);
    errorCode[2] = 4;
    errorCode[3] = 20;
    errorCode.set(reason, 4);
    const list = new Uint8Array(unknown.length * 2);
    unknown.forEach((t, i) => new DataView(list.buffer).setUint16(2 * i, t));
    return encodeStun(BINDING, StunClass.ERROR, msg.transactionId, [{ type: StunAttr.ERROR_CODE, value: errorCode }, { type: StunAttr.UNKNOWN_ATTRIBUTES, value: list }]);
  }
  return encodeStun(BINDING, StunClass.SUCCESS, msg.transactionId, [
    { type: StunAttr.XOR_MAPPED_ADDRESS, value: xorMappedAddress(address, port, msg.transactionId) },
    { type: StunAttr.SOFTWARE, value: SOFTWARE },
    ...(other !== undefined ? [{ type: StunAttr.OTHER_ADDRESS, value: plainAddress(other.address, other.port) }] : []),
  ]);
}

/**
 * A wildcard host binds one socket per local address instead: an answer must come from the address
 * the request went to, or the client's NAT (which expects the reply from there) drops it, and a
 * socket bound to 0.0.0.0 on a machine with several addresses answers from whichever the route picks.
 */
function bindAddresses(host: string): string[] {
  if (host !== '0.0.0.0' && host !== '::') return [host];
  const all = Object.values(networkInterfaces()).flat().filter((a) => a !== undefined);
  return all.filter((a) => (host === '::' || a.family === 'IPv4') && !(a.family === 'IPv6' && a.address.startsWith('fe80:'))).map((a) => a.address);
}

function bindOne(address: string, port: number): Promise<Socket> {
  const socket = createSocket({ type: address.includes(':') ? 'udp6' : 'udp4', reuseAddr: false });
  return new Promise<Socket>((resolve, reject) => {
    socket.once('error', (err) => {
      socket.close();
      reject(new KiwiError('LISTEN_FAILED', `Cannot listen for STUN on UDP ${address}:${port}: ${err.message}. Choose another port.`));
    });
    socket.bind(port, address, () => resolve(socket));
  });
}

export interface StunServerOptions {
  host: string;
  port: number;
  /** The service's other port (OTHER-ADDRESS names it); undefined: none. */
  otherPort?: () => number | undefined;
  /**
   * The rendezvous's two public addresses, for RFC 5780's full mapping test: a request to one of
   * them is told the other one (with the other port) as OTHER-ADDRESS; both must be among the
   * addresses served (`host` 0.0.0.0 or ::). Default: OTHER-ADDRESS names the address asked.
   */
  addressPair?: readonly [string, string];
}

/** What OTHER-ADDRESS names to a request that came to `local`. */
export function otherAddressFor(local: string, pair: readonly [string, string] | undefined): string {
  if (pair === undefined) return local;
  return local === pair[0] ? pair[1] : local === pair[1] ? pair[0] : local;
}

export async function startStunServer(opts: StunServerOptions): Promise<StunServer> {
  const addresses = bindAddresses(opts.host);
  for (const a of opts.addressPair ?? []) {
    if (!addresses.includes(a)) throw new KiwiError('LISTEN_FAILED', `The STUN service's second address ${a} is not one of this machine's addresses it listens on (${addresses.join(', ')}).`);
  }
  const sockets: Socket[] = [];
  try {
    const first = await bindOne(addresses[0] ?? opts.host, opts.port);
    sockets.push(first);
    // The others on the port the first one got.
    for (const a of addresses.slice(1)) sockets.push(await bindOne(a, first.address().port));
  } catch (err) {
    for (const s of sockets) s.close();
    throw err;
  }
  let answered = 0;
  for (const socket of sockets) {
    // After binding, errors (an ICMP unreachable reported on send) concern one peer only.
    socket.on('error', () => undefined);
    socket.on('message', (datagram, rinfo) => {
      const otherPort = opts.otherPort?.();
      const other = otherPort !== undefined ? { address: otherAddressFor(socket.address().address, opts.addressPair), port: otherPort } : undefined;
      const reply = answerStun(datagram, rinfo.address, rinfo.port, other);
      if (reply === undefined) return;
      answered++;
      socket.send(reply, rinfo.port, rinfo.address);
    });
  }
  return {
    port: (sockets[0] as Socket).address().port,
    get answered() {
      return answered;
    },
    close: async () => {
      await Promise.all(sockets.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    },
  };
}
