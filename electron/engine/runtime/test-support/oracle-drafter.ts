// A drafter that knows the answer (tests and bench/speculative.ts): it drafts the continuation of
// an earlier run (`reference`: prompt + generated ids), each token right with probability `p`
// (seeded), else replaced by a wrong one. Off the reference path it drafts nothing. It measures
// the mechanism (one ring trip for k tokens, rollback on rejection) apart from a drafter's skill.
import type { Drafter } from '../prompt-lookup.js';
import { Rng } from '../sampling.js';

export class OracleDrafter implements Drafter {
  readonly name = 'oracle';
  private readonly rng: Rng;
  /** Draft tokens handed out, and how many of them were the reference's. */
  drafted = 0;
  right = 0;

  constructor(
    private readonly reference: readonly number[],
    private readonly p: number,
    private readonly vocab: number,
    seed = 1,
  ) {
    this.rng = new Rng(seed);
  }

  draft(history: readonly number[], k: number): number[] {
    const at = history.length;
    for (let i = Math.max(0, at - 8); i < at; i++) if (history[i] !== this.reference[i]) return [];
    const out: number[] = [];
    for (let i = at; i < Math.min(at + k, this.reference.length); i++) {
      const truth = this.reference[i]!;
      const right = this.rng.next() < this.p;
      out.push(right ? truth : (truth + 1 + Math.floor(this.rng.next() * (this.vocab - 1))) % this.vocab);
      this.drafted++;
      if (right) this.right++;
    }
    return out;
  }
}
