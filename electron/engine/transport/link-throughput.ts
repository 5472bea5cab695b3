// How fast a secure link carries bulk bytes, from padded PINGs (secure-link.ts): a PING with N bytes
// of padding comes back as a bare PONG, so its round trip minus the bare one is N bytes' transfer.
// A transfer shorter than the round trip's noise says little, so the padding grows (x4, up to
// 1 MiB) until it takes at least 5 ms and half a round trip. pipeline/link-wire.ts turns the
// figure into the link's activation encoding.
import { MAX_PING_PADDING_BYTES, type SecureLink } from './secure-link.js';

export interface LinkThroughput {
  /** MB/s (10^6 bytes). */
  throughputMBps: number;
  /** Padding bytes of the PING that was timed. */
  bytes: number;
}

const FIRST_BYTES = 64 * 1024;
const MIN_TRANSFER_MS = 5;

/** Measures `link`'s throughput given its bare round trip (`rttMs`); rejects like ping() on a dead link. */
export async function measureThroughput(link: SecureLink, rttMs: number, timeoutMs = 10_000): Promise<LinkThroughput> {
  for (let bytes = FIRST_BYTES; ; bytes = Math.min(bytes * 4, MAX_PING_PADDING_BYTES)) {
    const transferMs = (await link.ping(timeoutMs, bytes)) - rttMs;
    if ((transferMs >= MIN_TRANSFER_MS && transferMs >= rttMs / 2) || bytes === MAX_PING_PADDING_BYTES) {
      return { throughputMBps: bytes / 1e6 / (Math.max(transferMs, 0.05) / 1000), bytes };
    }
  }
}
