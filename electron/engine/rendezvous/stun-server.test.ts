import { createHmac } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { IcePeer } from '../transport/ice-link.js';
import { startRendezvous } from './server.js';
import { stunBinding, stunBindingWithOther } from './stun-client.js';
import { BINDING, encodeStun, parseStun, plainAddress, readPlainAddress, readXorMappedAddress, StunAttr, StunClass, unknownRequired, xorMappedAddress } from './stun-message.js';
import { probeNatMapping } from './stun-nat.js';
import { answerStun, otherAddressFor, startStunServer, type StunServer } from './stun-server.js';

const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));

// RFC 5769 section 2: the sample request, IPv4 response and IPv6 response.
const SAMPLE_REQUEST = hex(`
  00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
  00 24 00 04 6e 00 01 ff
  80 29 00 08 93 2f f9 b1 51 26 3b 36
  00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20
  00 08 00 14 9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
  80 28 00 04 e5 7a 3b cf`);
const SAMPLE_V4_RESPONSE = hex(`
  01 01 00 3c 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
  00 20 00 08 00 01 a1 47 e1 12 a6 43
  00 08 00 14 2b 91 f5 99 fd 9e 90 c3 8c 74 89 f9 2a f9 ba 53 f0 6b e7 d7
  80 28 00 04 c0 7d 4c 96`);
const SAMPLE_V6_RESPONSE = hex(`
  01 01 00 48 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
  80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
  00 20 00 14 00 02 a1 47 01 13 a9 fa a5 d3 f1 79 bc 25 f4 b5 be d2 b9 d9
  00 08 00 14 a3 82 95 4e 4b e6 7b f1 17 84 c9 7c 82 92 c2 75 bf e3 ed 41
  80 28 00 04 c8 fb 0b 4c`);
const PASSWORD = 'VOkJxbRl1RmTxUk/WvJxBt';

/** MESSAGE-INTEGRITY (RFC 8489 14.5): HMAC-SHA1 over the message up to it, its length field counting it. */
function integrityOk(msg: Uint8Array, offset: number, value: Uint8Array): boolean {
  const head = Buffer.from(msg.subarray(0, offset));
  head.writeUInt16BE(offset + 24 - 20, 2);
  return createHmac('sha1', PASSWORD).update(head).digest().equals(Buffer.from(value));
}

describe('STUN messages (RFC 5769 test vectors)', () => {
  it('parses the sample request: a Binding request whose fingerprint and integrity check', () => {
    const msg = parseStun(SAMPLE_REQUEST);
    expect([msg.method, msg.cls]).toEqual([BINDING, StunClass.REQUEST]);
    expect(Buffer.from(msg.transactionId).toString('hex')).toBe('b7e7a701bc34d686fa87dfae');
    expect(msg.attributes.map((a) => a.type)).toEqual([StunAttr.SOFTWARE, StunAttr.PRIORITY, StunAttr.ICE_CONTROLLED, StunAttr.USERNAME, StunAttr.MESSAGE_INTEGRITY, StunAttr.FINGERPRINT]);
    expect(Buffer.from(msg.attributes[3]!.value).toString()).toBe('evtj:h6vY');
    const mi = msg.attributes[4]!;
    expect(integrityOk(SAMPLE_REQUEST, mi.offset, mi.value)).toBe(true);
    expect(unknownRequired(msg)).toEqual([]);
  });

  it('reads the mapped address of the sample IPv4 and IPv6 responses', () => {
    for (const [bytes, want] of [
      [SAMPLE_V4_RESPONSE, { family: 'IPv4', address: '192.0.2.1', port: 32853 }],
      [SAMPLE_V6_RESPONSE, { family: 'IPv6', address: '2001:db8:1234:5678:11:2233:4455:6677', port: 32853 }],
    ] as const) {
      const msg = parseStun(bytes);
      expect(msg.cls).toBe(StunClass.SUCCESS);
      const xma = msg.attributes.find((a) => a.type === StunAttr.XOR_MAPPED_ADDRESS)!;
      expect(readXorMappedAddress(xma.value, msg.transactionId)).toEqual(want);
      // And the encoder produces the same attribute value.
      expect(Buffer.from(xorMappedAddress(want.address, want.port, msg.transactionId)).equals(Buffer.from(xma.value))).toBe(true);
      const mi = msg.attributes.find((a) => a.type === StunAttr.MESSAGE_INTEGRITY)!;
      expect(integrityOk(bytes, mi.offset, mi.value)).toBe(true);
    }
  });

  it('refuses truncated, overlong, mislabelled and tampered datagrams with STUN_MALFORMED', () => {
    const bad = [
      SAMPLE_REQUEST.subarray(0, 19),
      SAMPLE_REQUEST.subarray(0, SAMPLE_REQUEST.length - 4),
      Uint8Array.from([...SAMPLE_REQUEST, 0, 0, 0, 0]),
      (() => { const b = SAMPLE_REQUEST.slice(); b[4] = 0; return b; })(),
      (() => { const b = SAMPLE_REQUEST.slice(); b[0] = 0xc0; return b; })(),
      (() => { const b = SAMPLE_REQUEST.slice(); b[30] = b[30]! ^ 1; return b; })(),
      // An attribute whose length runs past the end.
      (() => { const b = SAMPLE_REQUEST.slice(); b[22] = 0x7f; return b; })(),
      new Uint8Array(2000),
    ];
    for (const b of bad) expect(() => parseStun(b)).toThrow(expect.objectContaining({ code: 'STUN_MALFORMED' }));
  });
});

describe('the STUN service', () => {
  let server: StunServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('answers the RFC 5769 sample request with the sender\'s address, and drops what is not a Binding request', () => {
    const reply = answerStun(SAMPLE_REQUEST, '192.0.2.1', 32853)!;
    const msg = parseStun(reply);
    expect([msg.method, msg.cls]).toEqual([BINDING, StunClass.SUCCESS]);
    expect(Buffer.from(msg.transactionId).toString('hex')).toBe('b7e7a701bc34d686fa87dfae');
    const xma = msg.attributes.find((a) => a.type === StunAttr.XOR_MAPPED_ADDRESS)!;
    expect(readXorMappedAddress(xma.value, msg.transactionId)).toEqual({ family: 'IPv4', address: '192.0.2.1', port: 32853 });
    expect(answerStun(SAMPLE_V4_RESPONSE, '192.0.2.1', 1)).toBeUndefined();
    expect(answerStun(Uint8Array.of(1, 2, 3), '192.0.2.1', 1)).toBeUndefined();
    expect(answerStun(encodeStun(BINDING, StunClass.INDICATION, new Uint8Array(12), []), '192.0.2.1', 1)).toBeUndefined();
  });

  it('answers an unknown comprehension-required attribute with 420 and lists it', () => {
    const req = encodeStun(BINDING, StunClass.REQUEST, new Uint8Array(12).fill(7), [{ type: 0x0003, value: new Uint8Array(4) }]);
    const msg = parseStun(answerStun(req, '::ffff:10.0.0.1', 5)!);
    expect(msg.cls).toBe(StunClass.ERROR);
    const code = msg.attributes.find((a) => a.type === StunAttr.ERROR_CODE)!.value;
    expect((code[2]! * 100) + code[3]!).toBe(420);
    expect([...msg.attributes.find((a) => a.type === StunAttr.UNKNOWN_ATTRIBUTES)!.value]).toEqual([0, 3]);
  });

  it('tells a client over UDP the address and port it sends from', async () => {
    server = await startStunServer({ host: '127.0.0.1', port: 0 });
    const socket = createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
    try {
      const mapped = await stunBinding({ host: '127.0.0.1', port: server.port }, { socket });
      expect(mapped).toEqual({ family: 'IPv4', address: '127.0.0.1', port: socket.address().port });
      expect(server.answered).toBe(1);
    } finally {
      socket.close();
    }
  });

  it('runs beside the rendezvous on UDP at its WebSocket port number', async () => {
    const rv = await startRendezvous({ host: '127.0.0.1', port: 0 });
    try {
      expect(rv.stunPort).toBe(rv.port);
      expect((await stunBinding({ host: '127.0.0.1', port: rv.port })).address).toBe('127.0.0.1');
    } finally {
      await rv.close();
    }
    const off = await startRendezvous({ host: '127.0.0.1', port: 0, stun: false });
    expect(off.stunPort).toBeUndefined();
    await off.close();
  });

  it('is asked for its public address by an ICE link (libdatachannel) gathering candidates', async () => {
    const stun = await startStunServer({ host: '127.0.0.1', port: 0 });
    try {
      let b: IcePeer | undefined;
      const a = new IcePeer({ role: 'initiator', iceServers: [`stun:127.0.0.1:${stun.port}`], sendSignal: (s) => setImmediate(() => b?.signal(s)), maxMessageBytes: 1 << 20 });
      b = new IcePeer({ role: 'responder', sendSignal: (s) => setImmediate(() => a.signal(s)), maxMessageBytes: 1 << 20 });
      const [la, lb] = await Promise.all([a.link, b.link]);
      la.close();
      lb.close();
      await new Promise<void>((resolve) => {
        const check = (): void => (stun.answered > 0 ? resolve() : void setTimeout(check, 20));
        check();
      });
      expect(stun.answered).toBeGreaterThan(0);
    } finally {
      await stun.close();
    }
  });

  it('names its other port as OTHER-ADDRESS, and a probe through no NAT finds endpoint-independent mapping', async () => {
    for (const [a, p] of [['198.51.100.7', 3479], ['2001:db8::7', 3479]] as const) expect(readPlainAddress(plainAddress(a, p))).toMatchObject({ address: a.replace('::', ':0:0:0:0:0:'), port: p });
    const rv = await startRendezvous({ host: '127.0.0.1', port: 0 });
    try {
      const probe = await probeNatMapping({ host: '127.0.0.1', port: rv.port });
      expect(probe).toMatchObject({ mapping: 'endpoint-independent', natClass: 'permissive', mapped: { address: '127.0.0.1' } });
    } finally {
      await rv.close();
    }
    // A STUN server that names no other port: the mapping cannot be told.
    server = await startStunServer({ host: '127.0.0.1', port: 0 });
    expect((await probeNatMapping({ host: '127.0.0.1', port: server.port })).mapping).toBe('unknown');
  });

  it('names the second public address of a configured pair as OTHER-ADDRESS (RFC 5780), and refuses one it does not serve', async () => {
    const pair = ['198.51.100.7', '198.51.100.8'] as const;
    expect([otherAddressFor('198.51.100.7', pair), otherAddressFor('198.51.100.8', pair), otherAddressFor('10.0.0.1', pair), otherAddressFor('10.0.0.1', undefined)])
      .toEqual(['198.51.100.8', '198.51.100.7', '10.0.0.1', '10.0.0.1']);
    const err = await startStunServer({ host: '0.0.0.0', port: 0, addressPair: ['127.0.0.1', '198.51.100.8'] }).catch((e: unknown) => e);
    expect(isKiwiError(err, 'LISTEN_FAILED')).toBe(true);
    // A wildcard service with a pair still answers on each address, naming the other port.
    server = await startStunServer({ host: '0.0.0.0', port: 0, addressPair: ['127.0.0.1', '127.0.0.1'], otherPort: () => 4242 });
    expect((await stunBindingWithOther({ host: '127.0.0.1', port: server.port })).other).toMatchObject({ address: '127.0.0.1', port: 4242 });
  });

  it('runs its second STUN service on the port its owner names, and refuses one that is taken', async () => {
    const taken = createSocket('udp4');
    await new Promise<void>((r) => taken.bind(0, '127.0.0.1', r));
    const takenPort = taken.address().port;
    try {
      const err = await startRendezvous({ host: '127.0.0.1', port: 0, stunSecondPort: takenPort }).catch((e: unknown) => e);
      expect(isKiwiError(err, 'USAGE')).toBe(true);
      expect((err as Error).message).toContain(`--stun-second-port`);
    } finally {
      taken.close();
    }
    // The port just freed: the rendezvous names it as its OTHER-ADDRESS.
    const rv = await startRendezvous({ host: '127.0.0.1', port: 0, stunSecondPort: takenPort });
    try {
      expect((await stunBindingWithOther({ host: '127.0.0.1', port: rv.port })).other).toMatchObject({ address: '127.0.0.1', port: takenPort });
    } finally {
      await rv.close();
    }
  });

  it('fails with CONNECT_FAILED when nothing answers', async () => {
    const silent = createSocket('udp4');
    await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', () => resolve()));
    try {
      const err = await stunBinding({ host: '127.0.0.1', port: silent.address().port }, { timeoutMs: 50, retries: 1 }).catch((e: unknown) => e);
      expect(isKiwiError(err, 'CONNECT_FAILED')).toBe(true);
    } finally {
      silent.close();
    }
  });
});
