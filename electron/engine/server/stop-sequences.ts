// Stop sequences over streamed text: text is released only once it can no longer be the start of a
// stop string, and never includes the stop string itself. Pure; one instance per response.

export interface StopPush {
  /** Text that is safe to send now. */
  text: string;
  /** A stop sequence was found: `text` ends right before it and nothing more may be sent. */
  stopped: boolean;
}

export class StopSequenceFilter {
  private held = '';
  private done = false;
  private readonly stops: readonly string[];
  private readonly longest: number;

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
    this.longest = Math.max(0, ...this.stops.map((s) => s.length));
  }

  get stopped(): boolean {
    return this.done;
  }

  push(piece: string): StopPush {
    if (this.done) return { text: '', stopped: true };
    const buffer = this.held + piece;
    if (this.stops.length === 0) return { text: buffer, stopped: false };
    let first = -1;
    for (const s of this.stops) {
      const at = buffer.indexOf(s);
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
      this.done = true;
      this.held = '';
      return { text: buffer.slice(0, first), stopped: true };
    }
    const keep = this.partialStopSuffix(buffer);
    this.held = buffer.slice(buffer.length - keep);
    return { text: buffer.slice(0, buffer.length - keep), stopped: false };
  }

  /** The text still held back; call once when generation ended without a stop sequence. */
  flush(): string {
    const rest = this.done ? '' : this.held;
    this.held = '';
    return rest;
  }

  /** Length of the longest end of `buffer` that is the beginning of some stop sequence. */
  private partialStopSuffix(buffer: string): number {
    for (let k = Math.min(buffer.length, this.longest - 1); k > 0; k--) {
      const tail = buffer.slice(buffer.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) return k;
    }
    return 0;
  }
}
