import { beforeAll, describe, expect, test } from 'vitest';
import type { Tokenizer } from '../../model/tokenizer/tokenizer.js';
import { tokenizerFromNpmVocab } from '../../model/tokenizer/test-vectors.js';
import { type AutomatonState, canEnd, JsonGrammar, stepBytes } from './json-automaton.js';
import { ANY_OBJECT, compileJsonSchema } from './json-schema-shape.js';
import { GrammarConstraint, maskVocabOf } from './token-constraint.js';
import { MaskVocab, TokenTrie } from './token-trie.js';

const enc = (s: string) => new TextEncoder().encode(s);
const has = (bits: Uint32Array, id: number) => ((bits[id >>> 5]! >>> (id & 31)) & 1) === 1;

describe('TokenTrie', () => {
  test('lays tokens out in preorder with subtree skips, shared prefixes once, equal pieces on one node', () => {
    const trie = new TokenTrie([
      { id: 0, bytes: enc('ab') },
      { id: 1, bytes: enc('a') },
      { id: 2, bytes: enc('b') },
      { id: 3, bytes: enc('abc') },
      { id: 4, bytes: enc('a') },
      { id: 5, bytes: new Uint8Array(0) },
    ]);
    expect(String.fromCharCode(...trie.byte)).toBe('abcb');
    expect([...trie.depth]).toEqual([1, 2, 3, 1]);
    expect([...trie.skip]).toEqual([3, 3, 3, 4]);
    const idsAt = (i: number) => [...trie.tokIds.subarray(trie.tokStart[i], trie.tokStart[i + 1])];
    expect([0, 1, 2, 3].map(idsAt)).toEqual([[1, 4], [0], [3], [2]]);
  });
});

const weather = {
  type: 'object',
  properties: { city: { type: 'string' }, unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer' }, tags: { type: 'array', items: { type: 'number' } } },
  required: ['city', 'unit', 'days', 'tags'],
  additionalProperties: false,
};

describe('the token mask over the real Llama 3 vocabulary (128,256 tokens)', () => {
  let tok: Tokenizer;
  let vocab: MaskVocab;
  beforeAll(async () => {
    tok = await tokenizerFromNpmVocab('llama-bpe');
    vocab = maskVocabOf(tok);
  }, 60_000);

  const cases: [string, JsonGrammar, string][] = [
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), ''],
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), '{'],
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), '{"k'],
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), '{"k": '],
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), '{"k": [1, "x\\'],
    ['json_object', new JsonGrammar([{ value: ANY_OBJECT }]), '{"k": -1'],
    ['schema', new JsonGrammar([{ value: compileJsonSchema(weather) }]), '{"city": "San Fr'],
    ['schema', new JsonGrammar([{ value: compileJsonSchema(weather) }]), '{"city": "Oslo", "unit": "c'],
    ['schema', new JsonGrammar([{ value: compileJsonSchema(weather) }]), '{"city": "Oslo", "unit": "celsius", "days": 1'],
    ['tool call', new JsonGrammar([{ literal: '<tool_call>\n' }, { value: compileJsonSchema(weather) }, { literal: '\n</tool_call>' }]), '<tool'],
    ['tool call', new JsonGrammar([{ literal: '<tool_call>\n' }, { value: compileJsonSchema(weather) }, { literal: '\n</tool_call>' }]), '<tool_call>\n{"city":"a","unit":"celsius","days":3,"tags":[]}\n</tool'],
  ];

  test.each(cases)('%s after %j: the trie walk allows exactly the tokens that step the automaton one by one', (_, grammar, prefix) => {
    const state: AutomatonState = stepBytes(grammar.initial(), enc(prefix));
    expect(state.length).toBeGreaterThan(0);
    const bits = vocab.mask(state);
    const ends = new Set(vocab.endIds);
    let allowed = 0;
    for (let id = 0; id < tok.vocabSize; id++) {
      const piece = vocab.pieces[id]!;
      const brute = piece.length > 0 && !ends.has(id) && stepBytes(state, piece).length > 0;
      if (brute !== has(bits, id)) throw new Error(`token ${id} ${JSON.stringify(tok.decode([id]))}: brute force ${brute}, mask ${!brute}`);
      if (brute) allowed++;
    }
    expect(allowed).toBeGreaterThan(0);
  });

  test('end of generation is allowed exactly where the grammar may end, and the logits of the rest become -Infinity', () => {
    const grammar = new JsonGrammar([{ value: compileJsonSchema({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }) }]);
    const c = new GrammarConstraint(grammar, vocab);
    for (const id of tok.encode('{"n": 42', { addBos: false })) c.accept(id);
    let logits = new Float32Array(tok.vocabSize);
    c.maskLogits(logits);
    const eot = tok.tokenId('<|eot_id|>')!;
    expect(logits[eot]).toBe(-Infinity);
    expect(logits[tok.encode('}', { addBos: false })[0]!]).toBe(0);
    expect(logits[tok.encode('7', { addBos: false })[0]!]).toBe(0);
    expect(logits[tok.encode(' hello', { addBos: false })[0]!]).toBe(-Infinity);
    c.accept(tok.encode('}', { addBos: false })[0]!);
    expect(c.finished).toBe(true);
    expect(canEnd((c as unknown as { state: AutomatonState }).state)).toBe(true);
    logits = new Float32Array(tok.vocabSize);
    c.maskLogits(logits);
    const open = [...logits.keys()].filter((i) => logits[i] !== -Infinity);
    expect(open.sort((a, b) => a - b)).toEqual([...vocab.endIds].sort((a, b) => a - b));
  });

  test('a token the grammar does not allow is refused loudly', () => {
    const c = new GrammarConstraint(new JsonGrammar([{ value: ANY_OBJECT }]), vocab);
    expect(() => c.accept(tok.encode('hello', { addBos: false })[0]!)).toThrow(/does not allow/);
  });
});
