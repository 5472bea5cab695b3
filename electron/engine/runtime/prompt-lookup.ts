// Prompt-lookup drafting (n-gram drafting, as llama.cpp's `--lookup` and vLLM's "ngram"
// speculator): the tokens that followed the latest earlier occurrence of the text's last n tokens
// are a guess at what follows now. It needs no model: summaries, code edits, quoting and any text
// that repeats itself draft well; free prose rarely finds a match, and then nothing is drafted.
// Pure: history in, draft out.

export interface Drafter {
  /** What /health calls it. */
  readonly name: string;
  /**
   * Up to `k` tokens guessed to follow `history` (prompt + generated); [] when there is no guess.
   * `key` is the request (a drafter with state per request keeps it under that key until release).
   */
  draft(history: readonly number[], k: number, key?: object): number[] | Promise<number[]>;
  /** The request of `key` ended. */
  release?(key: object): void;
}

export interface PromptLookupOptions {
  /** Longest suffix tried first. Default 4. */
  maxNgram?: number;
  /** Shortest suffix that may match. Default 2 (one token matches too often to be worth a step). */
  minNgram?: number;
  /** Only the latest this many tokens are searched (bounds the cost per step). Default 4096. */
  window?: number;
}

export class PromptLookupDrafter implements Drafter {
  readonly name = 'prompt-lookup';
  private readonly maxNgram: number;
  private readonly minNgram: number;
  private readonly window: number;

  constructor(opts: PromptLookupOptions = {}) {
    this.maxNgram = opts.maxNgram ?? 4;
    this.minNgram = opts.minNgram ?? 2;
    this.window = opts.window ?? 4096;
    if (!(Number.isInteger(this.minNgram) && this.minNgram >= 1 && this.maxNgram >= this.minNgram)) throw new Error(`prompt lookup n-grams ${this.minNgram}..${this.maxNgram}`);
  }

  draft(history: readonly number[], k: number): number[] {
    const len = history.length;
    if (k <= 0) return [];
    const from = Math.max(0, len - this.window);
    for (let n = Math.min(this.maxNgram, len - 1); n >= this.minNgram; n--) {
      // The latest earlier start i (i + n < len) whose n tokens equal the last n.
      for (let i = len - n - 1; i >= from; i--) {
        let j = 0;
        while (j < n && history[i + j] === history[len - n + j]) j++;
        if (j < n) continue;
        const out = history.slice(i + n, Math.min(i + n + k, len));
        if (out.length > 0) return out;
      }
    }
    return [];
  }
}
