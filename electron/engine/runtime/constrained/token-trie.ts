// The vocabulary as a byte trie in preorder arrays, and the token mask of an automaton state: walk
// the trie, advancing the state by each edge's byte and skipping a whole subtree as soon as the
// state dies, so the cost follows the tokens that can still match, not the vocabulary's size.
// Inside a JSON string body (where most of a 128K vocabulary is allowed) the walk covers only the
// few thousand tokens that hold `"`, `\` or a control byte; every other token is allowed from a
// bitset computed once per vocabulary. Built once per tokenizer; the mask is a Uint32Array bitset.
import type { AutomatonState, Thread } from './json-automaton.js';
import { inStringBody, step } from './json-automaton.js';

/** Tokens in preorder: node i has byte[i] at depth[i] (1 = a first byte); skip[i] is the node after its subtree. */
export class TokenTrie {
  readonly byte: Uint8Array;
  readonly depth: Uint16Array;
  readonly skip: Int32Array;
  /** The ids whose piece ends at node i: tokIds[tokStart[i] .. tokStart[i + 1]). */
  readonly tokStart: Int32Array;
  readonly tokIds: Int32Array;
  readonly maxDepth: number;

  constructor(tokens: ReadonlyArray<{ id: number; bytes: Uint8Array }>) {
    // Sorted by bytes (a latin1 string compares as its bytes do), then id: preorder of the trie.
    const keyed = tokens.filter((t) => t.bytes.length > 0).map((t) => ({ ...t, key: String.fromCharCode(...t.bytes) }));
    const sorted = keyed.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id - b.id));
    const bytes: number[] = [];
    const depths: number[] = [];
    const skips: number[] = [];
    const starts: number[] = [];
    const ids: number[] = [];
    const path: number[] = []; // node index at each depth - 1
    let prev: Uint8Array = new Uint8Array(0);
    let maxDepth = 0;
    for (const t of sorted) {
      let lcp = 0;
      while (lcp < prev.length && lcp < t.bytes.length && prev[lcp] === t.bytes[lcp]) lcp++;
      while (path.length > lcp) skips[path.pop()!] = bytes.length;
      for (let d = lcp; d < t.bytes.length; d++) {
        path.push(bytes.length);
        bytes.push(t.bytes[d]!);
        depths.push(d + 1);
        skips.push(-1);
        starts.push(ids.length);
      }
      ids.push(t.id); // at the deepest node, which is the last one created (or the same piece again)
      maxDepth = Math.max(maxDepth, t.bytes.length);
      prev = t.bytes;
    }
    while (path.length > 0) skips[path.pop()!] = bytes.length;
    starts.push(ids.length);
    this.byte = Uint8Array.from(bytes);
    this.depth = Uint16Array.from(depths);
    this.skip = Int32Array.from(skips);
    this.tokStart = Int32Array.from(starts);
    this.tokIds = Int32Array.from(ids);
    this.maxDepth = maxDepth;
  }

  get nodeCount(): number {
    return this.byte.length;
  }

  /** Sets the bit of every token whose bytes take `start` to a live state. Returns the nodes visited. */
  walk(start: AutomatonState, bits: Uint32Array): number {
    const n = this.byte.length;
    const states: AutomatonState[] = new Array<AutomatonState>(this.maxDepth + 1);
    states[0] = start;
    let visited = 0;
    let i = 0;
    while (i < n) {
      visited++;
      const d = this.depth[i]!;
      const next = step(states[d - 1]!, this.byte[i]!);
      if (next.length === 0) {
        i = this.skip[i]!;
        continue;
      }
      states[d] = next;
      const end = this.tokStart[i + 1]!;
      for (let k = this.tokStart[i]!; k < end; k++) {
        const id = this.tokIds[k]!;
        bits[id >>> 5]! |= 1 << (id & 31);
      }
      i++;
    }
    return visited;
  }
}

/** A byte that leaves a JSON string body or is not allowed in one. */
const isStringSpecial = (b: number): boolean => b === 0x22 || b === 0x5c || b < 0x20;

/** Everything the mask needs of one vocabulary, built once. */
export class MaskVocab {
  readonly trie: TokenTrie;
  /** Tokens with a `"`, `\` or control byte: the only ones walked inside a string body. */
  readonly specialTrie: TokenTrie;
  /** Tokens made only of bytes a string body keeps: allowed whenever a thread is in a string body. */
  readonly plainBits: Uint32Array;
  readonly words: number;

  constructor(
    readonly vocabSize: number,
    /** Each token's bytes as generated (empty for control tokens, which the grammar never allows). */
    readonly pieces: readonly Uint8Array[],
    /** End-of-generation ids: allowed exactly where the grammar may end. */
    readonly endIds: readonly number[],
  ) {
    const ends = new Set(endIds);
    const tokens = pieces.map((bytes, id) => ({ id, bytes })).filter((t) => t.bytes.length > 0 && !ends.has(t.id));
    this.trie = new TokenTrie(tokens);
    this.specialTrie = new TokenTrie(tokens.filter((t) => t.bytes.some(isStringSpecial)));
    this.words = Math.ceil(vocabSize / 32);
    this.plainBits = new Uint32Array(this.words);
    for (const t of tokens) if (!t.bytes.some(isStringSpecial)) this.plainBits[t.id >>> 5]! |= 1 << (t.id & 31);
  }

  /** The allowed tokens (end ids excluded: the caller adds them where the state may end). */
  mask(state: AutomatonState, bits: Uint32Array = new Uint32Array(this.words)): Uint32Array {
    // A token is allowed when some thread accepts it, so the mask of a state is the union of its threads' masks.
    for (const th of state) {
      const one: Thread[] = [th];
      if (inStringBody(th)) {
        for (let w = 0; w < this.words; w++) bits[w]! |= this.plainBits[w]!;
        this.specialTrie.walk(one, bits);
      } else {
        this.trie.walk(one, bits);
      }
    }
    return bits;
  }
}
