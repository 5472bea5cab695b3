import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { KiwiError } from '../../errors.js';
import { acceptsText, canEnd, isFinished, JsonGrammar, step, type AutomatonState } from './json-automaton.js';
import { ANY_OBJECT, compileJsonSchema } from './json-schema-shape.js';

type Schema = Record<string, unknown>;

const grammarOf = (schema: Schema) => new JsonGrammar([{ value: compileJsonSchema(schema) }]);

/** A small validator of the schema subset, written apart from the compiler so the two check each other. */
function validates(v: unknown, s: Schema, root: Schema = s): boolean {
  if (typeof s.$ref === 'string') {
    const target = s.$ref.split('/').slice(1).reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], root) as Schema;
    return validates(v, target, root);
  }
  if ('const' in s && JSON.stringify(v) !== JSON.stringify(s.const)) return false;
  if (Array.isArray(s.enum) && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return false;
  if (Array.isArray(s.anyOf) && !s.anyOf.some((alt) => validates(v, alt as Schema, root))) return false;
  const types = s.type === undefined ? undefined : Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  if (types !== undefined) {
    const t = v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;
    if (!types.includes(t) && !(t === 'integer' && types.includes('number'))) return false;
  }
  if (typeof s.minimum === 'number' && typeof v === 'number' && v < s.minimum) return false;
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    const props = (s.properties ?? {}) as Record<string, Schema>;
    for (const r of (s.required ?? []) as string[]) if (!(r in v)) return false;
    for (const [k, val] of Object.entries(v)) {
      if (k in props) {
        if (!validates(val, props[k]!, root)) return false;
      } else if (s.additionalProperties === false || (s.additionalProperties === undefined && Object.keys(props).length > 0)) return false;
      else if (typeof s.additionalProperties === 'object' && !validates(val, s.additionalProperties as Schema, root)) return false;
    }
  }
  if (Array.isArray(v)) {
    if (typeof s.minItems === 'number' && v.length < s.minItems) return false;
    if (typeof s.maxItems === 'number' && v.length > s.maxItems) return false;
    if (s.items !== undefined && !v.every((x) => validates(x, s.items as Schema, root))) return false;
  }
  return true;
}

const weather: Schema = {
  type: 'object',
  properties: { city: { type: 'string' }, unit: { enum: ['c', 'f'] }, days: { type: 'integer', minimum: 0 }, tags: { type: 'array', items: { type: 'number' }, maxItems: 2 } },
  required: ['city', 'unit'],
  additionalProperties: false,
};

describe('the JSON automaton', () => {
  test.each([
    [weather, '{"city":"Oslo","unit":"c"}', true],
    [weather, '{"city": "Oslo", "unit": "f", "days": 3, "tags": [1.5, -2e3]}', true],
    [weather, '{\n  "city": "\\u00e9\\n\\"x\\"",\n  "unit": "c"\n}', true],
    [weather, '{"unit":"c","city":"Oslo"}', false], // properties come in the schema's order
    [weather, '{"city":"Oslo"}', false], // a required one missing
    [weather, '{"city":"Oslo","unit":"k"}', false], // not in the enum
    [weather, '{"city":"Oslo","unit":"c","days":-1}', false], // minimum 0
    [weather, '{"city":"Oslo","unit":"c","days":1.5}', false], // integer
    [weather, '{"city":"Oslo","unit":"c","tags":[1,2,3]}', false], // maxItems
    [weather, '{"city":"Oslo","unit":"c","x":1}', false], // additionalProperties false
    [weather, '{"city":"Oslo","unit":"c"} ', false], // nothing after the value
    [weather, ' {"city":"Oslo","unit":"c"}', false], // nor before it
    [weather, '{"city":"a\u0001","unit":"c"}', false], // a control character in a string
    [weather, '{"city":"a\\x","unit":"c"}', false], // a bad escape
    [{ type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }, '{"n":01}', false],
    [{ type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }, '{"n":-0.5E+12}', true],
    [{ anyOf: [{ type: 'string' }, { type: 'null' }] }, 'null', true],
    [{ anyOf: [{ type: 'string' }, { type: 'null' }] }, '"x"', true],
    [{ type: ['integer', 'boolean'] }, 'false', true],
    [{ type: ['integer', 'boolean'] }, '7', true],
    [{ const: { a: [1, 'x'] } }, '{"a":[1,"x"]}', true],
    [{ const: { a: [1, 'x'] } }, '{"a": [1,"x"]}', false], // a const is its compact JSON
    [{ enum: [1, 12] }, '1', true],
    [{ enum: [1, 12] }, '12', true],
    [{ type: 'array', items: { type: 'boolean' }, minItems: 1 }, '[]', false],
    [{ type: 'object' }, '{"any":{"thing":[null,true,"x",1.5]}}', true],
    [{ type: 'object', additionalProperties: { type: 'integer' } }, '{"a":1,"b":2}', true],
    [{ type: 'object', additionalProperties: { type: 'integer' } }, '{"a":"x"}', false],
    [{ $defs: { node: { type: 'object', properties: { next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } }, required: ['next'] } }, $ref: '#/$defs/node' }, '{"next":{"next":null}}', true],
  ])('%j accepts %j: %s', (schema, text, ok) => {
    expect(acceptsText(grammarOf(schema), text)).toBe(ok);
  });

  test('json_object accepts any object and nothing else', () => {
    const g = new JsonGrammar([{ value: ANY_OBJECT }]);
    expect(acceptsText(g, '{"a":[1,{"b":null}],"c":"d"}')).toBe(true);
    expect(acceptsText(g, '[1]')).toBe(false);
    expect(acceptsText(g, '"x"')).toBe(false);
  });

  test('literal framing around the value, and finished only after the last literal', () => {
    const g = new JsonGrammar([{ literal: '<tool_call>\n' }, { value: compileJsonSchema({ type: 'boolean' }) }, { literal: '\n</tool_call>' }]);
    let s: AutomatonState = g.initial();
    for (const b of new TextEncoder().encode('<tool_call>\ntrue\n</tool_call')) s = step(s, b);
    expect(isFinished(s)).toBe(false);
    s = step(s, 0x3e);
    expect(isFinished(s)).toBe(true);
    expect(step(s, 0x20)).toEqual([]);
  });

  test('a number at the top level may end or go on', () => {
    let s: AutomatonState = grammarOf({ type: 'integer' }).initial();
    s = step(s, 0x34);
    expect(canEnd(s)).toBe(true);
    expect(isFinished(s)).toBe(false);
    expect(step(s, 0x32).length).toBeGreaterThan(0);
  });

  test('whitespace is bounded, so a forced generation ends', () => {
    let s: AutomatonState = grammarOf(weather).initial();
    s = step(s, 0x7b);
    s = step(s, 0x0a);
    for (let i = 0; i < 20; i++) s = step(s, 0x20);
    expect(s.length).toBeGreaterThan(0);
    expect(step(s, 0x20)).toEqual([]);
    expect(step(step(grammarOf(weather).initial(), 0x7b), 0x20).flatMap((t) => step([t], 0x20))).toEqual([]);
  });

  test.each([
    [{ type: 'string', pattern: 'a+' }, "'pattern'"],
    [{ type: 'string', format: 'email' }, "'format'"],
    [{ type: 'integer', minimum: 5 }, "'minimum' with 5"],
    [{ type: 'object', properties: { a: { type: 'string', maxLength: 3 } } }, "'maxLength' at /properties/a"],
    [{ type: 'array', prefixItems: [] }, "'prefixItems'"],
    [{ $ref: 'https://example.com/s.json' }, 'non-local $ref'],
    [{ allOf: [{ type: 'string' }, { type: 'number' }] }, 'allOf'],
    [{ type: 'object', required: ['x'] }, "required property 'x'"],
    [{ type: 'tuple' }, "type 'tuple'"],
  ])('refuses %j naming %s', (schema, what) => {
    const err = (() => {
      try {
        compileJsonSchema(schema);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(KiwiError);
    expect((err as KiwiError).code).toBe('API_BAD_REQUEST');
    expect((err as KiwiError).message).toContain(what);
  });

  test('a $ref loop that consumes nothing is refused while decoding, not hung on', () => {
    const g = grammarOf({ $defs: { a: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' });
    expect(() => step(g.initial(), 0x7b)).toThrow(KiwiError);
  });
});

/** Walks the automaton with random allowed bytes (drawn by `pick`) until it may end; closers are preferred after `budget` bytes. */
function randomSentence(schema: Schema, pick: (n: number) => number, budget: number): string {
  const g = grammarOf(schema);
  let s: AutomatonState = g.initial();
  const bytes: number[] = [];
  const closers = [...'"}]:0e'].map((c) => c.charCodeAt(0));
  const alphabet = [...'{}[],:"\\ntrufalse0123456789.-+eEbu x\n\u00e9'].flatMap((c) => [...new TextEncoder().encode(c)]);
  while (!isFinished(s) && !(canEnd(s) && (bytes.length > budget || pick(4) === 0))) {
    if (bytes.length > 20 * budget + 400) throw new Error(`the walk does not end: ${new TextDecoder().decode(Uint8Array.from(bytes)).slice(0, 200)}`);
    const live = [...new Set(alphabet)].filter((b) => step(s, b).length > 0);
    // Past the budget: the first closer allowed, in the order that ends strings, then containers.
    const closer = closers.find((b) => live.includes(b));
    const pool = bytes.length > budget && closer !== undefined ? [closer] : live;
    if (pool.length === 0) {
      // Literal alternatives (enum values, keys) may need bytes outside the alphabet.
      const any = Array.from({ length: 256 }, (_, b) => b).filter((b) => step(s, b).length > 0);
      if (any.length === 0) throw new Error(`dead end after ${JSON.stringify(new TextDecoder().decode(Uint8Array.from(bytes)))}`);
      pool.push(any[pick(any.length)]!);
    }
    const b = pool[pick(pool.length)]!;
    bytes.push(b);
    s = step(s, b);
  }
  return new TextDecoder().decode(Uint8Array.from(bytes));
}

describe('every text the automaton accepts parses as JSON and validates against the schema', () => {
  const schemas: Schema[] = [
    weather,
    { type: 'object' },
    { type: 'object', properties: { a: { anyOf: [{ type: 'array', items: { type: 'integer' } }, { type: 'string' }, { type: 'null' }] }, b: { const: 'k' } }, required: ['b'] },
    { type: 'object', properties: { nested: { type: 'object', properties: { x: { type: 'boolean' }, y: { enum: ['é', 'a"b', 3] } }, required: ['x', 'y'], additionalProperties: false } }, required: ['nested'], additionalProperties: { type: 'number' } },
    { type: 'array', items: { type: 'object', properties: { k: { type: 'number' } }, required: ['k'] }, minItems: 1, maxItems: 3 },
    { $defs: { t: { type: 'object', properties: { v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/t' }, maxItems: 2 } }, required: ['v', 'kids'] } }, $ref: '#/$defs/t' },
  ];
  test.each(schemas.map((s, i) => [i, s] as const))('schema %i', (_, schema) => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { minLength: 64, maxLength: 64 }), fc.integer({ min: 0, max: 60 }), (seeds, budget) => {
        let k = 0;
        const text = randomSentence(schema, (n) => seeds[k++ % seeds.length]! % n, budget);
        const value: unknown = JSON.parse(text);
        expect(validates(value, schema)).toBe(true);
      }),
      { numRuns: 60 },
    );
  });
});
