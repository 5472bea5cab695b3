// The bearer secrets of Kiwi's HTTP servers (the API key, the control API's token), compared in
// constant time: both sides are hashed to equal length first, so neither length nor prefix leaks.
import { createHash, timingSafeEqual } from 'node:crypto';

/** What a server keeps of its secret: the SHA-256 digest, to compare against. */
export function secretDigest(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

/** Whether `given` is the secret whose digest is `digest`, in the same time whatever `given` is. */
export function matchesSecret(given: string, digest: Buffer): boolean {
  return timingSafeEqual(secretDigest(given), digest);
}
