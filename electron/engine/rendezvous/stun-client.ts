// One STUN Binding request from a UDP socket (RFC 8489 section 6.2.1): what address and port the
// server saw it come from. Used by tests of the STUN service and by NAT probes; ICE links do their
// own STUN inside libdatachannel.
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { isKiwiError, KiwiError } from '../errors.js';
import { BINDING, encodeStun, parseStun, readPlainAddress, readXorMappedAddress, StunAttr, StunClass, type MappedAddress } from './stun-message.js';

export interface BindingOptions {
  socket?: Socket;
  timeoutMs?: number;
  retries?: number;
}

export async function stunBinding(server: { host: string; port: number }, opts: BindingOptions = {}): Promise<MappedAddress> {
  return (await stunBindingWithOther(server, opts)).mapped;
}

/** The mapped address and, when the server names one (OTHER-ADDRESS), where else it answers. */
export async function stunBindingWithOther(server: { host: string; port: number }, opts: BindingOptions = {}): Promise<{ mapped: MappedAddress; other: MappedAddress | undefined }> {
  const socket = opts.socket ?? createSocket(server.host.includes(':') ? 'udp6' : 'udp4');
  const own = opts.socket === undefined;
  const transactionId = randomBytes(12);
  const request = encodeStun(BINDING, StunClass.REQUEST, transactionId, []);
  const timeoutMs = opts.timeoutMs ?? 500;
  const tries = 1 + (opts.retries ?? 3);
  try {
    return await new Promise<{ mapped: MappedAddress; other: MappedAddress | undefined }>((resolve, reject) => {
      let sent = 0;
      let timer: NodeJS.Timeout | undefined;
      const onMessage = (datagram: Buffer): void => {
        try {
          const msg = parseStun(datagram);
          if (Buffer.compare(msg.transactionId, transactionId) !== 0) return;
          if (msg.cls !== StunClass.SUCCESS) throw new KiwiError('STUN_MALFORMED', 'The STUN server answered the Binding request with an error.');
          const attr = msg.attributes.find((a) => a.type === StunAttr.XOR_MAPPED_ADDRESS);
          if (attr === undefined) throw new KiwiError('STUN_MALFORMED', 'The STUN answer has no XOR-MAPPED-ADDRESS.');
          const other = msg.attributes.find((a) => a.type === StunAttr.OTHER_ADDRESS);
          finish(undefined, { mapped: readXorMappedAddress(attr.value, transactionId), other: other !== undefined ? readPlainAddress(other.value) : undefined });
        } catch (err) {
          // Stray datagrams that are not STUN are someone else's.
          if (isKiwiError(err, 'STUN_MALFORMED') && !String(err.message).includes('answer')) return;
          finish(err as Error);
        }
      };
      const finish = (err: Error | undefined, value?: { mapped: MappedAddress; other: MappedAddress | undefined }): void => {
        clearTimeout(timer);
        socket.off('message', onMessage);
        if (err !== undefined) reject(err);
        else resolve(value as { mapped: MappedAddress; other: MappedAddress | undefined });
      };
      const send = (): void => {
        if (sent++ >= tries) {
          finish(new KiwiError('CONNECT_FAILED', `No STUN answer from ${server.host}:${server.port} after ${tries} tries.`));
          return;
        }
        socket.send(request, server.port, server.host);
        timer = setTimeout(send, timeoutMs * sent);
      };
      socket.on('message', onMessage);
      if (own) socket.bind(0, send);
      else send();
    });
  } finally {
    if (own) socket.close();
  }
}
