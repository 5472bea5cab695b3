// One request's constrained decoding: the automaton state of what it generated so far, the mask it
// puts on each step's logits (disallowed tokens to -Infinity, end-of-generation only where the
// grammar may end), and the advance by the sampled token. The generation loop calls it around the
// sampler (runtime/generation-loop.ts sampleNext), the same for the local batch and the ring's head.
// Vocabularies are prepared once per tokenizer, grammars once per schema (cached by hash).
import { createHash } from 'node:crypto';
import { KiwiError } from '../../errors.js';
import type { Tokenizer } from '../../model/tokenizer/tokenizer.js';
import type { AutomatonState, GrammarItem } from './json-automaton.js';
import { canEnd, isFinished, JsonGrammar, stepBytes } from './json-automaton.js';
import { MaskVocab } from './token-trie.js';

/** What a generation loop needs of a constraint. */
export interface TokenConstraint {
  /** Sets every token the grammar does not allow next to -Infinity, in place. */
  maskLogits(logits: Float32Array): void;
  /** Advances by the token that was sampled (it must have been allowed). */
  accept(id: number): void;
  /** Nothing but the end of generation can follow: the generation ends here. */
  readonly finished: boolean;
}

const vocabs = new WeakMap<Tokenizer, MaskVocab>();

/** The mask vocabulary of a tokenizer (built on first use: about a second at 128K tokens). */
export function maskVocabOf(tok: Tokenizer): MaskVocab {
  let v = vocabs.get(tok);
  if (v === undefined) {
    const pieces: Uint8Array[] = [];
    for (let id = 0; id < tok.vocabSize; id++) pieces.push(tok.isControl(id) ? new Uint8Array(0) : tok.tokenPiece(id));
    v = new MaskVocab(tok.vocabSize, pieces, tok.endOfGenerationIds);
    vocabs.set(tok, v);
  }
  return v;
}

const GRAMMAR_CACHE_SIZE = 64;
const grammars = new Map<string, JsonGrammar>();

/**
 * The compiled grammar for a request, from the cache when the same spec (hashed) was compiled
 * before. `build` runs on a miss and may throw the KiwiError that refuses the schema.
 */
export function cachedGrammar(spec: unknown, build: () => readonly GrammarItem[]): JsonGrammar {
  const key = createHash('sha256').update(JSON.stringify(spec)).digest('base64');
  const hit = grammars.get(key);
  if (hit !== undefined) {
    grammars.delete(key); // re-insert: the Map's order is the LRU order
    grammars.set(key, hit);
    return hit;
  }
  const g = new JsonGrammar(build());
  grammars.set(key, g);
  if (grammars.size > GRAMMAR_CACHE_SIZE) grammars.delete(grammars.keys().next().value!);
  return g;
}

export class GrammarConstraint implements TokenConstraint {
  private state: AutomatonState;
  private readonly bits: Uint32Array;

  constructor(
    grammar: JsonGrammar,
    private readonly vocab: MaskVocab,
  ) {
    this.state = grammar.initial();
    this.bits = new Uint32Array(vocab.words);
  }

  get finished(): boolean {
    return isFinished(this.state);
  }

  /** The allowed ids as a bitset (end ids included where the grammar may end). */
  allowed(): Uint32Array {
    const bits = this.bits;
    bits.fill(0);
    this.vocab.mask(this.state, bits);
    if (canEnd(this.state)) for (const id of this.vocab.endIds) bits[id >>> 5]! |= 1 << (id & 31);
    return bits;
  }

  maskLogits(logits: Float32Array): void {
    const bits = this.allowed();
    let any = false;
    for (let w = 0; w < bits.length; w++) {
      const word = bits[w]!;
      if (word === 0) {
        logits.fill(-Infinity, w * 32, Math.min(logits.length, w * 32 + 32));
        continue;
      }
      any = true;
      if (word === 0xffffffff) continue;
      const base = w * 32;
      const top = Math.min(32, logits.length - base);
      for (let j = 0; j < top; j++) if (((word >>> j) & 1) === 0) logits[base + j] = -Infinity;
    }
    if (!any) throw new KiwiError('GRAMMAR_DEAD_END', 'constrained decoding reached a state no token of this vocabulary can continue; the schema cannot be generated with this model');
  }

  accept(id: number): void {
    if (this.vocab.endIds.includes(id)) {
      if (!canEnd(this.state)) throw new Error(`end of generation sampled where the grammar cannot end`);
      this.state = [];
      return;
    }
    const next = stepBytes(this.state, this.vocab.pieces[id] ?? new Uint8Array(0));
    if (next.length === 0 || this.vocab.pieces[id]!.length === 0) throw new Error(`token ${id} was sampled although the grammar does not allow it`);
    this.state = next;
  }
}

/** A constraint for one request over `tok`'s vocabulary. */
export function createConstraint(grammar: JsonGrammar, tok: Tokenizer): GrammarConstraint {
  return new GrammarConstraint(grammar, maskVocabOf(tok));
}
