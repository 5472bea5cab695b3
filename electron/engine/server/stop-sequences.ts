// Stop sequences over streamed text: text is released only once it can no longer be the start of a
// stop string, and never includes the stop string itself. Pure; one instance per response.
import { firstPendingStop, firstStop } from '../runtime/stop-matcher.js';

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
    const first = firstStop(buffer, this.stops);
    // A stop that begins before the one found (or before the end) may still complete with the
    // next pieces ("b\n\n" in "ab\n" when "\n" matched): the earliest stop in the whole text wins.
    const pending = firstPendingStop(buffer, this.stops, this.longest, first >= 0 ? first : buffer.length);
    if (first >= 0 && pending < 0) {
      this.done = true;
      this.held = '';
      return { text: buffer.slice(0, first), stopped: true };
    }
    const keepFrom = pending >= 0 ? pending : buffer.length;
    this.held = buffer.slice(keepFrom);
    return { text: buffer.slice(0, keepFrom), stopped: false };
  }

  /**
   * The text still held back; call once when generation ended. A stop sequence inside it (one
   * found while an earlier one might still have completed) cuts it, and `stopped` turns true.
   */
  flush(): string {
    const rest = this.done ? '' : this.held;
    this.held = '';
    const at = firstStop(rest, this.stops);
    if (at < 0) return rest;
    this.done = true;
    return rest.slice(0, at);
  }
}
