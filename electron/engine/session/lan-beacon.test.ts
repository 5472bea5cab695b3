import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { broadcastTargets, decodeBeacon, encodeBeacon, findOnLan, startBeacon } from './lan-beacon.js';

const port = (): number => 20_000 + Math.floor(Math.random() * 30_000);

describe('LAN beacon', () => {
  it('round-trips a beacon', () => {
    const b = { kiwi: 1 as const, nameplate: 42, rendezvous: ['ws://192.168.1.20:7420'] };
    expect(decodeBeacon(encodeBeacon(b))).toEqual(b);
  });

  it('ignores datagrams that are not beacons (fuzz)', () => {
    expect(decodeBeacon(Buffer.from('{"kiwi":1,"nameplate":42,"rendezvous":["http://x"]}'))).toBeUndefined();
    expect(decodeBeacon(Buffer.alloc(2000, 0x7b))).toBeUndefined();
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => void decodeBeacon(bytes)));
  });

  it('includes the limited broadcast address among the targets', () => {
    expect(broadcastTargets()).toContain('255.255.255.255');
  });

  it('finds the announced rendezvous of a nameplate and ignores other sessions', async () => {
    const p = port();
    const other = await startBeacon({ beacon: { kiwi: 1, nameplate: 7, rendezvous: ['ws://127.0.0.1:1111'] }, port: p, targets: ['127.0.0.1'], intervalMs: 50 });
    const mine = await startBeacon({ beacon: { kiwi: 1, nameplate: 42, rendezvous: ['ws://127.0.0.1:2222'] }, port: p, targets: ['127.0.0.1'], intervalMs: 50 });
    try {
      expect(await findOnLan(42, { port: p, timeoutMs: 3000 })).toEqual(['ws://127.0.0.1:2222']);
    } finally {
      await other.close();
      await mine.close();
    }
  });

  it('says what to do when no host announces the session', async () => {
    await expect(findOnLan(99, { port: port(), timeoutMs: 200 })).rejects.toMatchObject({ code: 'SESSION_NOT_FOUND_ON_LAN' });
  });
});
