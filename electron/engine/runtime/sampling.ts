// Token sampling: penalties, greedy, temperature, top-k, top-p, min-p and a seeded RNG, in
// llama.cpp's order (common/sampling.cpp: penalties -> top-k -> top-p -> min-p -> temperature
// -> draw). Pure: values in, values out; the only state is the RNG inside a Sampler.
import { KiwiError } from '../errors.js';

export interface SamplingOptions {
  /** 0 (or below) = greedy argmax. */
  temperature: number;
  /** Keep the k most likely tokens; 0 = off. */
  topK: number;
  /** Keep the smallest set whose probability reaches p; 1 = off. */
  topP: number;
  /** Drop tokens whose probability is below minP * the top probability; 0 = off. */
  minP: number;
  /** llama.cpp repeat penalty (divide positive logits, multiply negative ones); 1 = off. */
  repetitionPenalty: number;
  /** Subtracted once from every token seen in the window; 0 = off. */
  presencePenalty: number;
  /** Subtracted per occurrence in the window; 0 = off. */
  frequencyPenalty: number;
  /** How many of the latest tokens the penalties look at. */
  penaltyWindow: number;
  seed: number;
  /** Added to a token's logit before anything else samples (OpenAI's logit_bias); -100 or less bans it. */
  logitBias?: ReadonlyMap<number, number>;
  /** Report the chosen token's log-probability and this many alternatives (0..20) after each sample. */
  topLogprobs?: number;
  /** Scoring a given text: the first draws return these ids (their logprobs reported) instead of sampling. */
  forcedIds?: readonly number[];
}

/** A sampled token's log-probability under the (biased, penalized) distribution at temperature 1, and the most likely alternatives. */
export interface TokenLogprobs {
  id: number;
  logprob: number;
  /** Most likely first. */
  top: Array<{ id: number; logprob: number }>;
}

export const MAX_TOP_LOGPROBS = 20;

export const DEFAULT_SAMPLING: Readonly<SamplingOptions> = Object.freeze({
  temperature: 0,
  topK: 0,
  topP: 1,
  minP: 0,
  repetitionPenalty: 1,
  presencePenalty: 0,
  frequencyPenalty: 0,
  penaltyWindow: 64,
  seed: 0,
});

export function validateSampling(o: SamplingOptions): void {
  const bad = (what: string) => new KiwiError('USAGE', `invalid sampling option: ${what}`);
  if (!Number.isFinite(o.temperature) || o.temperature < 0) throw bad(`temperature ${o.temperature} must be >= 0`);
  if (!Number.isInteger(o.topK) || o.topK < 0) throw bad(`top_k ${o.topK} must be a non-negative integer`);
  if (!(o.topP > 0 && o.topP <= 1)) throw bad(`top_p ${o.topP} must be in (0, 1]`);
  if (!(o.minP >= 0 && o.minP <= 1)) throw bad(`min_p ${o.minP} must be in [0, 1]`);
  if (!(o.repetitionPenalty > 0)) throw bad(`repetition penalty ${o.repetitionPenalty} must be > 0`);
  if (!Number.isFinite(o.presencePenalty) || !Number.isFinite(o.frequencyPenalty)) throw bad('penalties must be finite');
  if (!Number.isInteger(o.penaltyWindow) || o.penaltyWindow < 0) throw bad(`penalty window ${o.penaltyWindow} must be >= 0`);
  if (!Number.isInteger(o.seed)) throw bad(`seed ${o.seed} must be an integer`);
  if (o.topLogprobs !== undefined && !(Number.isInteger(o.topLogprobs) && o.topLogprobs >= 0 && o.topLogprobs <= MAX_TOP_LOGPROBS)) {
    throw bad(`top logprobs ${o.topLogprobs} must be an integer in [0, ${MAX_TOP_LOGPROBS}]`);
  }
  for (const [id, b] of o.logitBias ?? []) if (!Number.isInteger(id) || id < 0 || !Number.isFinite(b)) throw bad(`logit bias ${id}: ${b}`);
}

/** Adds OpenAI's logit_bias in place; a bias of -100 or less bans the token outright. */
export function applyLogitBias(logits: Float32Array, bias: ReadonlyMap<number, number>): void {
  for (const [id, b] of bias) if (id < logits.length) logits[id] = b <= -100 ? -Infinity : logits[id]! + b;
}

/** log softmax(logits)[id] for `id` and the `top` most likely ids (ties: lower id first). One pass for the normalizer, one for the top list. */
export function tokenLogprobs(logits: Float32Array, id: number, top: number): TokenLogprobs {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  const logZ = max + Math.log(sum);
  const best: number[] = []; // ids, most likely first
  if (top > 0) {
    for (let i = 0; i < logits.length; i++) {
      const l = logits[i]!;
      if (best.length === top && !(l > logits[best[top - 1]!]!)) continue;
      let j = best.length < top ? best.length : top - 1;
      while (j > 0 && l > logits[best[j - 1]!]!) j--;
      best.splice(j, 0, i);
      if (best.length > top) best.length = top;
    }
  }
  const lp = (i: number): number => Math.max(logits[i]! - logZ, -9999); // -Infinity is not JSON
  return { id, logprob: lp(id), top: best.map((i) => ({ id: i, logprob: lp(i) })) };
}

/** xoshiro128** (Blackman & Vigna): small, fast, and the same sequence for the same seed everywhere. */
export class Rng {
  private s = new Uint32Array(4);

  constructor(seed: number) {
    // splitmix32 expands the seed into the four state words.
    let x = seed >>> 0;
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      this.s[i] = (z ^ (z >>> 16)) >>> 0;
    }
  }

  /** Uniform in [0, 1). */
  next(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1]!, 5), 7), 9) >>> 0;
    const t = (s[1]! << 9) >>> 0;
    s[2]! ^= s[0]!;
    s[3]! ^= s[1]!;
    s[1]! ^= s[2]!;
    s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return result / 2 ** 32;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** Applies repetition, presence and frequency penalties to the logits of tokens in `history`'s window, in place. */
export function applyPenalties(logits: Float32Array, history: readonly number[], o: SamplingOptions): void {
  if (o.repetitionPenalty === 1 && o.presencePenalty === 0 && o.frequencyPenalty === 0) return;
  const counts = new Map<number, number>();
  for (const id of history.slice(Math.max(0, history.length - o.penaltyWindow))) counts.set(id, (counts.get(id) ?? 0) + 1);
  for (const [id, n] of counts) {
    let l = logits[id];
    if (l === undefined) continue;
    l = l > 0 ? l / o.repetitionPenalty : l * o.repetitionPenalty;
    logits[id] = l - n * o.frequencyPenalty - o.presencePenalty;
  }
}

export function argmax(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
}

/**
 * Candidates left after top-k, top-p and min-p, with their probabilities at `temperature` (sum 1),
 * most likely first (ties: lower id first). Vocabularies have 128k+ entries, so nothing sorts the
 * whole vocabulary: top-k finds its threshold with a small heap, top-p widens a logit window
 * until it holds enough probability mass, and only the survivors are sorted.
 */
export function candidates(logits: Float32Array, o: SamplingOptions): { ids: number[]; probs: number[] } {
  const v = logits.length;
  let max = -Infinity;
  for (let i = 0; i < v; i++) if (logits[i]! > max) max = logits[i]!;
  // min-p: p_i >= minP * p_max  <=>  logit_i >= max + ln(minP).
  const floor = o.minP > 0 ? max + Math.log(o.minP) : -Infinity;
  const byLogit = (a: number, b: number) => logits[b]! - logits[a]! || a - b;
  const above = (t: number): number[] => {
    const out: number[] = [];
    for (let i = 0; i < v; i++) if (logits[i]! >= t) out.push(i);
    return out;
  };

  let pool: number[]; // sorted, most likely first
  let total = 0; // top-p's normalizer: the mass of what top-k kept (or of everything)
  if (o.topK > 0 && o.topK < v) {
    pool = above(kthLargest(logits, o.topK)).sort(byLogit).slice(0, o.topK);
    for (const id of pool) total += Math.exp(logits[id]! - max);
    pool = pool.filter((id) => logits[id]! >= floor);
  } else {
    for (let i = 0; i < v; i++) total += Math.exp(logits[i]! - max);
    if (o.topP < 1) {
      // Widen the window [max - width, max] until it holds topP of the mass (or reaches the floor).
      for (let width = 8; ; width *= 2) {
        pool = above(Math.max(floor, max - width));
        let mass = 0;
        for (const id of pool) mass += Math.exp(logits[id]! - max);
        if (mass >= o.topP * total || max - width <= floor || pool.length === v) break;
      }
    } else {
      pool = above(floor);
    }
    pool.sort(byLogit);
  }
  if (o.topP < 1) {
    let cum = 0;
    for (let i = 0; i < pool.length; i++) {
      cum += Math.exp(logits[pool[i]!]! - max) / total;
      if (cum >= o.topP) {
        pool.length = i + 1;
        break;
      }
    }
  }
  return { ids: pool, probs: softmax(logits, pool, o.temperature > 0 ? o.temperature : 1) };
}

/** The k-th largest value (a min-heap of the k largest seen). */
function kthLargest(values: Float32Array, k: number): number {
  const heap = new Float64Array(k);
  let n = 0;
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < n && heap[l]! < heap[m]!) m = l;
      if (r < n && heap[r]! < heap[m]!) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m]!, heap[i]!];
      i = m;
    }
  };
  for (let i = 0; i < values.length; i++) {
    const x = values[i]!;
    if (n < k) {
      let j = n++;
      heap[j] = x;
      while (j > 0 && heap[(j - 1) >> 1]! > heap[j]!) {
        const p = (j - 1) >> 1;
        [heap[p], heap[j]] = [heap[j]!, heap[p]!];
        j = p;
      }
    } else if (x > heap[0]!) {
      heap[0] = x;
      down(0);
    }
  }
  return heap[0]!;
}

function softmax(logits: Float32Array, ids: readonly number[], t: number): number[] {
  let max = -Infinity;
  for (const id of ids) max = Math.max(max, logits[id]!);
  const e = ids.map((id) => Math.exp((logits[id]! - max) / t));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

/** A sampler for one request: options plus its own RNG stream. */
export class Sampler {
  private readonly rng: Rng;
  private draws = 0;
  /** Set by each sample() when options.topLogprobs is given: the log-probabilities of the token it returned. */
  lastLogprobs: TokenLogprobs | undefined;

  constructor(readonly options: SamplingOptions) {
    validateSampling(options);
    this.rng = new Rng(options.seed);
  }

  /** Picks the next token from `logits` [vocab] (copied, not modified) given the tokens so far. */
  sample(logits: Float32Array, history: readonly number[]): number {
    const l = Float32Array.from(logits);
    applyPenalties(l, history, this.options);
    if (this.options.logitBias !== undefined) applyLogitBias(l, this.options.logitBias);
    const forced = this.options.forcedIds?.[this.draws++];
    const id = forced ?? this.draw(l);
    if (this.options.topLogprobs !== undefined) this.lastLogprobs = tokenLogprobs(l, id, this.options.topLogprobs);
    return id;
  }

  /**
   * sample() where a drafter guessed `draft` (speculative decoding): returns the draft when it is
   * accepted, else another token, so the result has exactly sample()'s distribution. Greedy (or
   * scoring): the token sample() would return. Else, for a deterministic draft x, x is accepted with
   * probability p(x) and otherwise a token is drawn from p without x, renormalised (Leviathan et
   * al. 2023 with q = the point mass at x). The same seed and drafts give the same tokens.
   */
  sampleWithDraft(logits: Float32Array, history: readonly number[], draft: number): number {
    if (this.options.temperature <= 0 || this.options.forcedIds !== undefined) return this.sample(logits, history);
    const l = Float32Array.from(logits);
    applyPenalties(l, history, this.options);
    if (this.options.logitBias !== undefined) applyLogitBias(l, this.options.logitBias);
    this.draws++;
    const { ids, probs } = this.distribution(l);
    const at = ids.indexOf(draft);
    const pDraft = at >= 0 ? probs[at]! : 0;
    let id = draft;
    if (!(this.rng.next() < pDraft)) {
      // Rejected: draw from the rest of the distribution (its mass is 1 - p(x) > 0 here).
      const target = this.rng.next() * (1 - pDraft);
      let cum = 0;
      id = -1;
      for (let i = 0; i < ids.length; i++) {
        if (i === at) continue;
        cum += probs[i]!;
        id = ids[i]!;
        if (target < cum) break;
      }
    }
    if (this.options.topLogprobs !== undefined) this.lastLogprobs = tokenLogprobs(l, id, this.options.topLogprobs);
    return id;
  }

  /** The distribution draw() samples from: candidates with their probabilities (the whole vocabulary without truncation). */
  private distribution(l: Float32Array): { ids: number[]; probs: number[] } {
    const o = this.options;
    if (o.topK !== 0 || o.topP < 1 || o.minP !== 0) return candidates(l, o);
    let max = -Infinity;
    for (let i = 0; i < l.length; i++) max = Math.max(max, l[i]!);
    const ids: number[] = [];
    const probs: number[] = [];
    let sum = 0;
    for (let i = 0; i < l.length; i++) {
      const e = Math.exp((l[i]! - max) / o.temperature);
      ids.push(i);
      probs.push(e);
      sum += e;
    }
    for (let i = 0; i < probs.length; i++) probs[i]! /= sum;
    return { ids, probs };
  }

  private draw(l: Float32Array): number {
    if (this.options.temperature <= 0) return argmax(l);
    const r = this.rng.next();
    const o = this.options;
    if (o.topK === 0 && o.topP >= 1 && o.minP === 0) return drawFromAll(l, o.temperature, r);
    const { ids, probs } = candidates(l, o);
    let cum = 0;
    for (let i = 0; i < ids.length; i++) {
      cum += probs[i]!;
      if (r < cum) return ids[i]!;
    }
    return ids[ids.length - 1]!;
  }
}

/** Draws from the full softmax at temperature t without sorting (no truncation asked). */
function drawFromAll(logits: Float32Array, t: number, r: number): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  const e = new Float64Array(logits.length);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += e[i] = Math.exp((logits[i]! - max) / t);
  let cum = 0;
  const target = r * sum;
  for (let i = 0; i < e.length; i++) {
    cum += e[i]!;
    if (target < cum) return i;
  }
  return argmax(logits);
}
