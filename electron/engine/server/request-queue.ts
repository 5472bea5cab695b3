// Admission of API requests: at most `maxActive` generations run at once and at most `maxWaiting`
// wait for a slot (FIFO); one more is refused at once (HTTP 429) instead of piling up.
import { KiwiError } from '../errors.js';

interface Waiter {
  grant: (release: () => void) => void;
}

export class RequestQueue {
  private activeCount = 0;
  private readonly waiters: Waiter[] = [];

  constructor(
    readonly maxActive: number,
    readonly maxWaiting: number,
  ) {
    if (!Number.isInteger(maxActive) || maxActive < 1) throw new Error(`maxActive must be a positive integer, got ${maxActive}`);
    if (!Number.isInteger(maxWaiting) || maxWaiting < 0) throw new Error(`maxWaiting must be a non-negative integer, got ${maxWaiting}`);
  }

  get active(): number {
    return this.activeCount;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /** Resolves with the slot's release function; rejects with API_QUEUE_FULL, or the abort reason of `signal`. */
  acquire(signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted();
    if (this.activeCount < this.maxActive && this.waiters.length === 0) return Promise.resolve(this.take());
    if (this.waiters.length >= this.maxWaiting) {
      return Promise.reject(
        new KiwiError(
          'API_QUEUE_FULL',
          `the server is busy: ${this.activeCount} requests are running and ${this.waiters.length} are waiting; retry shortly`,
          { active: this.activeCount, waiting: this.waiters.length },
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal.reason);
      };
      const waiter: Waiter = {
        grant: (release) => {
          signal.removeEventListener('abort', onAbort);
          resolve(release);
        },
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  private take(): () => void {
    this.activeCount++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.activeCount--;
      const next = this.waiters.shift();
      if (next !== undefined) next.grant(this.take());
    };
  }
}
