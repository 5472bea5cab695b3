// Finds stop sequences in generated text as it grows piece by piece. Only the tail that can hold a
// new match is kept and searched (the last `longest - 1` characters plus the new piece), so a
// token costs O(piece + longest stop) however long the text already is. Pure, no I/O.

export class StopMatcher {
  private readonly stops: readonly string[];
  /** Characters kept between pieces: a match that a new piece completes starts at most this far back. */
  private readonly keep: number;
  private tail = '';

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
    this.keep = Math.max(0, ...this.stops.map((s) => s.length - 1));
  }

  get active(): boolean {
    return this.stops.length > 0;
  }

  /** Characters held from earlier pieces (never more than the longest stop sequence minus one). */
  get heldChars(): number {
    return this.tail.length;
  }

  /** Whether the text, extended by `piece`, now contains a stop sequence. */
  push(piece: string): boolean {
    if (this.stops.length === 0 || piece === '') return false;
    const text = this.tail + piece;
    if (this.stops.some((s) => text.includes(s))) return true;
    this.tail = this.keep === 0 ? '' : text.slice(-this.keep);
    return false;
  }
}
