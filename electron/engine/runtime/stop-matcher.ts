// Finds stop sequences in generated text as it grows piece by piece. Only the tail that can hold a
// new match is kept and searched (at most `longest - 1` characters plus the new piece), so a token
// costs O(piece + longest stop) however long the text already is. Pure, no I/O. The server's
// StopSequenceFilter (server/stop-sequences.ts) cuts the text with the same two functions.

/** Where the earliest whole stop sequence in `text` begins, or -1. */
export function firstStop(text: string, stops: readonly string[]): number {
  let first = -1;
  for (const s of stops) {
    const at = text.indexOf(s);
    if (at >= 0 && (first < 0 || at < first)) first = at;
  }
  return first;
}

/**
 * The earliest position before `limit` from which the rest of `text` begins a longer stop
 * sequence (one that more text may still complete), or -1. `longest`: the longest stop's length.
 */
export function firstPendingStop(text: string, stops: readonly string[], longest: number, limit = text.length): number {
  for (let i = Math.max(0, text.length - longest + 1); i < limit; i++) {
    const tail = text.slice(i);
    if (stops.some((s) => s.length > tail.length && s.startsWith(tail))) return i;
  }
  return -1;
}

export class StopMatcher {
  private readonly stops: readonly string[];
  private readonly longest: number;
  private tail = '';

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
    this.longest = Math.max(0, ...this.stops.map((s) => s.length));
  }

  get active(): boolean {
    return this.stops.length > 0;
  }

  /** Characters held from earlier pieces (never more than the longest stop sequence minus one). */
  get heldChars(): number {
    return this.tail.length;
  }

  /**
   * Whether the text, extended by `piece`, now ends the generation: it holds a stop sequence and no
   * stop that begins earlier can still complete (the earliest stop in the whole text is the one
   * the response is cut at: "b\n\n" in "ab\n" is still open when "\n" matched).
   */
  push(piece: string): boolean {
    if (this.stops.length === 0 || piece === '') return false;
    const text = this.tail + piece;
    const first = firstStop(text, this.stops);
    const pending = firstPendingStop(text, this.stops, this.longest, first >= 0 ? first : text.length);
    if (first >= 0 && pending < 0) return true;
    // What a later piece may still complete: from the open stop, or the last longest - 1 characters.
    this.tail = pending >= 0 ? text.slice(pending) : text.slice(text.length - Math.min(text.length, this.longest - 1));
    return false;
  }
}
