// Progress at human rates: a transfer reports every chunk (thousands a second on loopback), a
// person or a script wants a few updates a second with the rate and the time left. ProgressRate
// takes every count and lets through at most one sample per `minIntervalMs`, plus always the
// final one (done === total) exactly; the rate is measured over a sliding window. The clock is
// injected, so tests feed simulated time.

export interface ProgressSample {
  /** Done so far (bytes, or whatever unit the caller counts). */
  done: number;
  /** null: not known. */
  total: number | null;
  /** Units per second over the recent window (the whole transfer for the final sample); null until measured. */
  rate: number | null;
  /** Seconds left at that rate; null when the total or the rate is not known. */
  etaSeconds: number | null;
  /** The last sample of this transfer: done reached total (or finish() was called). */
  final: boolean;
}

export interface ProgressRateOptions {
  /** At most one sample per this many ms (the final one always passes). Default 250: four a second. */
  minIntervalMs?: number;
  /** The rate is measured over about this much recent time. Default 5000. */
  windowMs?: number;
  now?: () => number;
}

export class ProgressRate {
  private readonly minIntervalMs: number;
  private readonly windowMs: number;
  private readonly now: () => number;
  private points: Array<{ at: number; done: number }> = [];
  private start: { at: number; done: number } | undefined;
  private lastEmitAt = -Infinity;
  private lastDone = 0;
  private total: number | null = null;
  private finished = false;

  constructor(opts: ProgressRateOptions = {}) {
    this.minIntervalMs = opts.minIntervalMs ?? 250;
    this.windowMs = opts.windowMs ?? 5000;
    this.now = opts.now ?? Date.now;
  }

  /**
   * Records the count so far; returns the sample to report, or null when the previous one was too
   * recent. A count below the previous one or a new total starts a new transfer.
   */
  update(done: number, total: number | null = this.total): ProgressSample | null {
    const at = this.now();
    if (this.start === undefined || done < this.lastDone || total !== this.total || this.finished) this.reset(at, done, total);
    this.lastDone = done;
    const final = total !== null && done >= total;
    if (!final && at - this.lastEmitAt < this.minIntervalMs) return null;
    return this.emit(at, done, final);
  }

  /** The final sample of a transfer whose total was not known (or that ended short of it). */
  finish(done: number = this.lastDone): ProgressSample {
    const at = this.now();
    if (this.start === undefined) this.reset(at, done, this.total);
    this.lastDone = done;
    return this.emit(at, done, true);
  }

  private reset(at: number, done: number, total: number | null): void {
    this.start = { at, done };
    this.points = [{ at, done }];
    this.lastEmitAt = -Infinity;
    this.total = total;
    this.finished = false;
  }

  private emit(at: number, done: number, final: boolean): ProgressSample {
    this.lastEmitAt = at;
    // One point per emitted sample is enough to measure a rate over the window.
    this.points.push({ at, done });
    while (this.points.length > 2 && at - (this.points[1] as { at: number }).at >= this.windowMs) this.points.shift();
    const from = final ? (this.start as { at: number; done: number }) : (this.points[0] as { at: number; done: number });
    const span = at - from.at;
    const rate = span > 0 ? ((done - from.done) * 1000) / span : null;
    const left = this.total === null ? null : Math.max(0, this.total - done);
    const etaSeconds = final ? 0 : left === null || rate === null || rate <= 0 ? null : left / rate;
    if (final) this.finished = true;
    return { done, total: this.total, rate, etaSeconds, final };
  }
}

/** Readable sizes: 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** "3 s", "2 min 5 s", "1 h 4 min". */
export function formatEta(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** One line for people: "312.0 MiB of 1.2 GiB (25%), 48 MiB/s, 19 s left". */
export function progressText(p: ProgressSample): string {
  const pct = p.total !== null && p.total > 0 ? ` (${Math.floor((100 * p.done) / p.total)}%)` : '';
  const of = p.total !== null ? ` of ${formatBytes(p.total)}` : '';
  const rate = p.rate !== null ? `, ${formatBytes(Math.round(p.rate))}/s` : '';
  const eta = p.final ? ', done' : p.etaSeconds !== null ? `, ${formatEta(p.etaSeconds)} left` : '';
  return `${formatBytes(p.done)}${of}${pct}${rate}${eta}`;
}
