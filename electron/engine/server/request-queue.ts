// Admission of API requests: at most `maxActive` generations run at once and at most `maxWaiting`
// wait for a slot (FIFO); one more is refused at once (HTTP 429) instead of piling up. A slot's
// holder may itself still wait inside the backend (for KV blocks): `load()` counts it as waiting.
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
    /** How many slot holders still wait inside the backend (for KV admission) rather than run. */
    private readonly waitingInBackend: () => number = () => 0,
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

  /** Requests generating now, and requests waiting (for a slot, or with a slot for the backend's admission). */
  load(): { running: number; waiting: number } {
    const inBackend = Math.min(this.activeCount, this.waitingInBackend());
    return { running: this.activeCount - inBackend, waiting: this.waiters.length + inBackend };
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
