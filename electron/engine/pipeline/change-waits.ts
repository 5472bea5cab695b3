// Waits on a condition over changing state (the session's members and links, stage reports):
// until() re-checks on every poke() and every 200 ms, and fails with SESSION_ENDED once the owner
// closes, SESSION_TIMEOUT after its timeout, or the signal's reason when aborted.
import { KiwiError } from '../errors.js';

export class ChangeWaits {
  private readonly waiters = new Set<() => void>();

  constructor(private readonly closed: () => boolean) {}

  /** Something changed: every wait re-checks. */
  poke(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Waits until `ready()` holds; what `ready` throws rejects the wait. */
  until(ready: () => boolean, what: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.closed()) return finish(new KiwiError('SESSION_ENDED', 'The host is closing.'));
        if (signal?.aborted) return finish(signal.reason);
        try {
          if (ready()) finish(undefined);
        } catch (err) {
          finish(err);
        }
      };
      const timer = setTimeout(() => finish(new KiwiError('SESSION_TIMEOUT', `Timed out waiting for ${what}.`)), timeoutMs);
      const tick = setInterval(check, 200);
      const finish = (err: unknown): void => {
        clearTimeout(timer);
        clearInterval(tick);
        this.waiters.delete(check);
        signal?.removeEventListener('abort', check);
        if (err === undefined) resolve();
        else reject(err);
      };
      this.waiters.add(check);
      signal?.addEventListener('abort', check);
      check();
    });
  }
}
