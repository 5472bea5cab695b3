import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createMemoryLinkPair } from './link.js';
import { measureThroughput } from './link-throughput.js';
import { MAX_PING_PADDING_BYTES, openSecureLink } from './secure-link.js';

async function securePair() {
  const [a, b] = createMemoryLinkPair();
  const secret = { secret: randomBytes(32), context: 'unit' };
  return Promise.all([
    openSecureLink(a, { role: 'initiator', secret, timeoutMs: 2000 }),
    openSecureLink(b, { role: 'responder', secret, timeoutMs: 2000 }),
  ]);
}

describe('link throughput from padded PINGs', () => {
  it('times a padded PING, which the peer answers with a bare PONG', async () => {
    const [a, b] = await securePair();
    const rtt = await a.ping();
    const t = await measureThroughput(a, rtt);
    expect(t.bytes).toBeGreaterThanOrEqual(64 * 1024);
    expect(t.bytes).toBeLessThanOrEqual(MAX_PING_PADDING_BYTES);
    expect(t.throughputMBps).toBeGreaterThan(0);
    expect(Number.isFinite(t.throughputMBps)).toBe(true);
    expect(a.closed || b.closed).toBe(false);
  });

  it('refuses padding beyond the limit before sending anything', async () => {
    const [a] = await securePair();
    await expect(a.ping(1000, MAX_PING_PADDING_BYTES + 1)).rejects.toMatchObject({ code: 'USAGE' });
    await expect(a.ping(1000, -1)).rejects.toMatchObject({ code: 'USAGE' });
  });

  it('fails, not hangs, on a link that closed', async () => {
    const [a, b] = await securePair();
    b.close('gone');
    await expect(measureThroughput(a, 1, 500)).rejects.toBeDefined();
  });
});
