// JSON Schema (the subset OpenAI's strict structured outputs use) compiled into Shapes: the value
// graph the JSON automaton walks. Every keyword is either supported, an annotation that does not
// change the output, or refused with a KiwiError naming it and where it is (never silently
// ignored). Object properties are generated in the schema's order, optional ones may be skipped.
// Pure: a schema in, a (possibly cyclic, for recursive $ref) Shape graph out.
import { KiwiError } from '../../errors.js';

/** Byte trie of the alternatives of a literal (`true`, an enum's JSON texts, an object's keys). */
export interface LitNode {
  next: Map<number, LitNode>;
  /** >= 0: a literal ends here, with this tag (for object keys: the property's index). */
  tag: number;
}

export interface ObjectProp {
  key: string;
  shape: Shape;
  required: boolean;
}

export type Shape =
  | { k: 'object'; props: ObjectProp[]; /** Further keys (after the declared ones) and their value shape. */ extra: Shape | undefined; /** Per phase p (props before p are done): the keys allowed next, as `"key"` tries. */ keys: LitNode[]; lastRequired: number }
  | { k: 'array'; items: Shape; minItems: number; maxItems: number }
  | { k: 'string' }
  | { k: 'number'; integer: boolean; /** No minus sign (minimum 0). */ nonNegative: boolean }
  | { k: 'literal'; trie: LitNode }
  | { k: 'anyOf'; alts: Shape[] };

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Keywords that describe a value without constraining it: accepted and not enforced. */
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions']);
const SUPPORTED = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'type', 'properties', 'required', 'additionalProperties', 'items', 'minItems', 'maxItems', 'enum', 'const', 'anyOf', 'oneOf', 'allOf', '$ref']);
const MAX_DEPTH = 64;
const MAX_PROPS = 256;

export function newLitNode(): LitNode {
  return { next: new Map(), tag: -1 };
}

export function addLiteral(root: LitNode, text: string, tag: number): void {
  let node = root;
  for (const b of new TextEncoder().encode(text)) {
    let child = node.next.get(b);
    if (child === undefined) node.next.set(b, (child = newLitNode()));
    node = child;
  }
  node.tag = tag;
}

function literalShape(texts: readonly string[]): Shape {
  const trie = newLitNode();
  for (const t of texts) addLiteral(trie, t, 0);
  return { k: 'literal', trie };
}

export const ANY_STRING: Shape = { k: 'string' };

/** Any JSON value (json_object's values; a schema `{}`). */
export const ANY_VALUE: Shape = (() => {
  const alts: Shape[] = [];
  const any: Shape = { k: 'anyOf', alts };
  const object = objectShape([], any);
  alts.push(object, { k: 'array', items: any, minItems: 0, maxItems: Infinity }, ANY_STRING, { k: 'number', integer: false, nonNegative: false }, literalShape(['true', 'false', 'null']));
  return any;
})();

/** Any JSON object: what `response_format: {type: 'json_object'}` asks for. */
export const ANY_OBJECT: Shape = (ANY_VALUE as { alts: Shape[] }).alts[0]!;

export function objectShape(props: ObjectProp[], extra: Shape | undefined): Shape {
  let lastRequired = -1;
  props.forEach((p, i) => {
    if (p.required) lastRequired = i;
  });
  const keys: LitNode[] = [];
  for (let phase = 0; phase <= props.length; phase++) {
    const trie = newLitNode();
    // After props[0, phase): any later prop may come next, skipping only optional ones.
    for (let j = phase; j < props.length; j++) {
      addLiteral(trie, JSON.stringify(props[j]!.key), j);
      if (props[j]!.required) break;
    }
    keys.push(trie);
  }
  return { k: 'object', props, extra, keys, lastRequired };
}

function unsupportedError(path: string, what: string, param: string): KiwiError {
  return new KiwiError('API_BAD_REQUEST', `the JSON schema${param === 'tools' ? ' of a tool' : ''} uses ${what} at ${path === '' ? 'its root' : path}, which constrained decoding does not support; supported: type, properties, required, additionalProperties, items, minItems, maxItems, enum, const, anyOf/oneOf, $ref to $defs`, { param });
}

/** Compiles a JSON schema into a Shape; refuses what it cannot enforce (KiwiError API_BAD_REQUEST naming the keyword). */
export function compileJsonSchema(schema: unknown, param = 'response_format'): Shape {
  const root = schema;
  const unsupported = (path: string, what: string): KiwiError => unsupportedError(path, what, param);
  const refs = new Map<string, Shape>();

  function resolveRef(ref: string, path: string, depth: number): Shape {
    const cached = refs.get(ref);
    if (cached !== undefined) return cached;
    if (ref !== '#' && !ref.startsWith('#/')) throw unsupported(path, `a non-local $ref '${ref}'`);
    let target: unknown = root;
    for (const part of ref === '#' ? [] : ref.slice(2).split('/')) {
      const key = part.replaceAll('~1', '/').replaceAll('~0', '~');
      if (typeof target !== 'object' || target === null || !(key in target)) throw unsupported(path, `a $ref '${ref}' that points nowhere`);
      target = (target as Record<string, unknown>)[key];
    }
    // A placeholder first, filled in place: recursive schemas become cyclic Shapes.
    const placeholder = { k: 'anyOf', alts: [] } as { k: 'anyOf'; alts: Shape[] };
    refs.set(ref, placeholder);
    placeholder.alts.push(compile(target, ref, depth + 1));
    return placeholder;
  }

  function compile(s: unknown, path: string, depth: number): Shape {
    if (depth > MAX_DEPTH) throw unsupported(path, `nesting deeper than ${MAX_DEPTH}`);
    if (s === true) return ANY_VALUE;
    if (typeof s !== 'object' || s === null || Array.isArray(s)) {
      throw new KiwiError('API_BAD_REQUEST', `the JSON schema at ${path === '' ? 'its root' : path} is not an object`, { param });
    }
    const o = s as Record<string, unknown>;
    for (const key of Object.keys(o)) {
      if (!SUPPORTED.has(key) && !ANNOTATIONS.has(key)) throw unsupported(path, `the keyword '${key}'`);
    }
    const parts: Shape[] = [];
    if (o.$ref !== undefined) {
      if (typeof o.$ref !== 'string') throw unsupported(path, 'a $ref that is not a string');
      parts.push(resolveRef(o.$ref, `${path}/$ref`, depth));
    }
    if (o.const !== undefined) parts.push(literalShape([JSON.stringify(o.const as Json)]));
    if (o.enum !== undefined) {
      if (!Array.isArray(o.enum) || o.enum.length === 0) throw unsupported(path, 'an enum that is not a non-empty array');
      parts.push(literalShape(o.enum.map((v) => JSON.stringify(v as Json))));
    }
    for (const key of ['anyOf', 'oneOf'] as const) {
      const list = o[key];
      if (list === undefined) continue;
      if (!Array.isArray(list) || list.length === 0) throw unsupported(path, `a ${key} that is not a non-empty array`);
      // oneOf is generated as anyOf: an output matching two alternatives is rare and still valid JSON of one.
      parts.push({ k: 'anyOf', alts: list.map((alt, i) => compile(alt, `${path}/${key}/${i}`, depth + 1)) });
    }
    if (o.allOf !== undefined) {
      if (!Array.isArray(o.allOf) || o.allOf.length !== 1) throw unsupported(path, 'allOf with other than one subschema');
      parts.push(compile(o.allOf[0], `${path}/allOf/0`, depth + 1));
    }
    const typed = typeShape(o, path, depth);
    if (typed !== undefined) parts.push(typed);
    if (parts.length === 0) return ANY_VALUE;
    if (parts.length > 1) {
      // const/enum/$ref/anyOf next to a type: the literal alternatives already pin the value; more than one combinator is an intersection.
      const lit = parts.find((p) => p.k === 'literal');
      if (lit !== undefined && parts.every((p) => p === lit || p === typed)) return lit;
      throw unsupported(path, 'several of $ref, const, enum, anyOf, oneOf, allOf together (an intersection)');
    }
    return parts[0]!;
  }

  function typeShape(o: Record<string, unknown>, path: string, depth: number): Shape | undefined {
    let types: string[];
    if (o.type === undefined) {
      if (o.properties !== undefined || o.additionalProperties !== undefined || o.required !== undefined) types = ['object'];
      else if (o.items !== undefined) types = ['array'];
      else return undefined;
    } else if (typeof o.type === 'string') types = [o.type];
    else if (Array.isArray(o.type) && o.type.length > 0 && o.type.every((t) => typeof t === 'string')) types = o.type as string[];
    else throw unsupported(path, 'a type that is neither a string nor a list of strings');
    const shapes = types.map((t): Shape => {
      switch (t) {
        case 'string':
          return ANY_STRING;
        case 'number':
        case 'integer':
          return { k: 'number', integer: t === 'integer', nonNegative: numberBounds(o, path) };
        case 'boolean':
          return literalShape(['true', 'false']);
        case 'null':
          return literalShape(['null']);
        case 'object':
          return objectTypeShape(o, path, depth);
        case 'array':
          return arrayShape(o, path, depth);
        default:
          throw unsupported(path, `the type '${t}'`);
      }
    });
    return shapes.length === 1 ? shapes[0] : { k: 'anyOf', alts: shapes };
  }

  /**
   * Bounds the automaton enforces: a lower bound of 0 (no minus sign), and bounds at or beyond
   * ±1e15, which its digit limit keeps anyway (zod's int() writes ±2^53-1). Others are refused.
   */
  function numberBounds(o: Record<string, unknown>, path: string): boolean {
    const far = 1e15;
    let nonNegative = false;
    for (const key of ['minimum', 'exclusiveMinimum'] as const) {
      const v = o[key];
      if (v === undefined) continue;
      if (typeof v !== 'number') throw unsupported(path, `a ${key} that is not a number`);
      if (v === 0 && key === 'minimum') nonNegative = true;
      else if (v > -far) throw unsupported(path, `the keyword '${key}' with ${v} (only 0 or below -1e15)`);
    }
    for (const key of ['maximum', 'exclusiveMaximum'] as const) {
      const v = o[key];
      if (v === undefined) continue;
      if (typeof v !== 'number') throw unsupported(path, `a ${key} that is not a number`);
      if (v < far) throw unsupported(path, `the keyword '${key}' with ${v} (only above 1e15)`);
    }
    return nonNegative;
  }

  function objectTypeShape(o: Record<string, unknown>, path: string, depth: number): Shape {
    const properties = o.properties ?? {};
    if (typeof properties !== 'object' || properties === null || Array.isArray(properties)) throw unsupported(path, 'properties that is not an object');
    const entries = Object.entries(properties as Record<string, unknown>);
    if (entries.length > MAX_PROPS) throw unsupported(path, `more than ${MAX_PROPS} properties`);
    const required = o.required ?? [];
    if (!Array.isArray(required) || !required.every((r) => typeof r === 'string')) throw unsupported(path, 'required that is not a list of strings');
    for (const r of required as string[]) if (!(r in (properties as object))) throw unsupported(path, `a required property '${r}' that is not in properties`);
    const props = entries.map(([key, sub]) => ({ key, shape: compile(sub, `${path}/properties/${key}`, depth + 1), required: (required as string[]).includes(key) }));
    // Free-form objects (no properties) take any keys unless additionalProperties is false; declared
    // ones take only their properties unless additionalProperties says otherwise (OpenAI strict mode).
    const ap = o.additionalProperties;
    let extra: Shape | undefined;
    if (ap === false) extra = undefined;
    else if (ap === true || (ap === undefined && entries.length === 0)) extra = ANY_VALUE;
    else if (ap === undefined) extra = undefined;
    else extra = compile(ap, `${path}/additionalProperties`, depth + 1);
    return objectShape(props, extra);
  }

  function arrayShape(o: Record<string, unknown>, path: string, depth: number): Shape {
    const min = o.minItems ?? 0;
    const max = o.maxItems ?? Infinity;
    if (typeof min !== 'number' || !Number.isInteger(min) || min < 0) throw unsupported(path, 'a minItems that is not a non-negative integer');
    if (typeof max !== 'number' || (max !== Infinity && (!Number.isInteger(max) || max < min))) throw unsupported(path, 'a maxItems below minItems or not an integer');
    if (Array.isArray(o.items)) throw unsupported(path, 'tuple items (an array of schemas)');
    return { k: 'array', items: o.items === undefined ? ANY_VALUE : compile(o.items, `${path}/items`, depth + 1), minItems: min, maxItems: max };
  }

  return compile(schema, '', 0);
}
