// A byte-level pushdown automaton over JSON text shaped by a Shape graph (json-schema-shape.ts),
// optionally framed by literal text (a tool call's `<tool_call>` ... `</tool_call>`). A state is a
// small set of threads; each thread is an immutable linked stack of frames, so advancing a state by
// one byte allocates a few objects and never mutates a state someone else holds (the token trie
// walk keeps one state per depth). Invariant: a state is empty exactly when no continuation of the
// bytes so far can be accepted. Whitespace between tokens is bounded (nextWs), and so
// are number digits, so a forced generation always comes to an end. Pure.
import { KiwiError } from '../../errors.js';
import type { LitNode, Shape } from './json-schema-shape.js';
import { addLiteral, newLitNode } from './json-schema-shape.js';

/** What the automaton accepts: literal text and JSON values, in order. */
export type GrammarItem = { literal: string } | { value: Shape };

// Whitespace between tokens, as llama.cpp's JSON grammar allows it: nothing, one space, or a newline
// and up to 20 spaces/tabs of indentation. A frame's `ws` counts: 0 none yet, 1..21 after a newline
// (and ws - 1 indentation characters), WS_CLOSED after a space or when no more may come.
const WS_CLOSED = 99;
const MAX_INDENT = 20;

/** The ws count after byte `b`, or -1 when `b` may not come here. */
function nextWs(ws: number, b: number): number {
  if (ws === 0) return b === 0x20 ? WS_CLOSED : b === 0x0a ? 1 : -1;
  if (ws <= MAX_INDENT && (b === 0x20 || b === 0x09)) return ws + 1;
  return -1;
}
// 15 digits stay below 2^53 (JSON numbers that every parser reads exactly) and below 1e15 (json-schema-shape's bounds).
const MAX_INT_DIGITS = 15;
const MAX_FRAC_DIGITS = 16;
const MAX_EXP_DIGITS = 3;
const MAX_THREADS = 64;
const MAX_EPSILON_DEPTH = 32;

const enum T { VALUE, OBJ, ARR, STR, NUM, LIT, SEQ, DONE }
// Object states: after `{`, after a `,`, inside a key, after a key, inside a value, after a value.
const enum O { OPEN, COMMA, KEY, COLON, VAL, AFTER }
const enum A { OPEN, COMMA, VAL, AFTER }
const enum S { BODY, ESC, U1, U2, U3, U4 }
const enum N { MINUS, ZERO, INT, DOT, FRAC, E, ESIGN, EXP }

type ObjShape = Extract<Shape, { k: 'object' }>;
type ArrShape = Extract<Shape, { k: 'array' }>;

type Frame =
  | { t: T.VALUE; shape: Shape; ws: number }
  | { t: T.OBJ; shape: ObjShape; st: O; phase: number; ws: number; pending: Shape | undefined }
  | { t: T.ARR; shape: ArrShape; st: A; n: number; ws: number }
  | { t: T.STR; st: S; key: boolean }
  | { t: T.NUM; st: N; d: number; integer: boolean }
  | { t: T.LIT; node: LitNode }
  | { t: T.SEQ; i: number; items: readonly CompiledItem[] }
  | { t: T.DONE };

export interface Thread {
  readonly f: Frame;
  readonly up: Thread | null;
}

type CompiledItem = { lit: LitNode } | { value: Shape };

/** A set of threads; empty = dead. */
export type AutomatonState = readonly Thread[];

const DONE_THREAD: Thread = { f: { t: T.DONE }, up: null };
const STR_FRAMES = [false, true].map((key) => [S.BODY, S.ESC, S.U1, S.U2, S.U3, S.U4].map((st) => ({ t: T.STR as const, st, key })));

const isWs = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number): boolean => b >= 0x30 && b <= 0x39;
const isHex = (b: number): boolean => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

export class JsonGrammar {
  private readonly items: CompiledItem[];

  constructor(items: readonly GrammarItem[]) {
    this.items = items
      .filter((it) => !('literal' in it) || it.literal !== '')
      .map((it) => {
        if ('value' in it) return { value: it.value };
        const lit = newLitNode();
        addLiteral(lit, it.literal, 0);
        return { lit };
      });
  }

  /** The state before any byte. */
  initial(): AutomatonState {
    const out: Thread[] = [];
    seqAt(this.items, 0, out);
    return out;
  }
}

/** Pushes the thread(s) that begin items[i] (DONE past the end). */
function seqAt(items: readonly CompiledItem[], i: number, out: Thread[]): void {
  if (i >= items.length) {
    out.push(DONE_THREAD);
    return;
  }
  const item = items[i]!;
  const seq: Thread = { f: { t: T.SEQ, i, items }, up: null };
  if ('lit' in item) emitLit(item.lit, seq, out);
  else out.push({ f: { t: T.VALUE, shape: item.value, ws: WS_CLOSED }, up: seq }); // no whitespace before the value
}

/** The frame below a completed one continues; `tag` says how it completed (a key's property index). */
function resume(up: Thread | null, tag: number, out: Thread[]): void {
  if (up === null) {
    out.push(DONE_THREAD);
    return;
  }
  const f = up.f;
  switch (f.t) {
    case T.OBJ: {
      if (f.st === O.KEY) {
        const isExtra = tag < 0;
        const shape = isExtra ? f.shape.extra! : f.shape.props[tag]!.shape;
        out.push({ f: { t: T.OBJ, shape: f.shape, st: O.COLON, phase: isExtra ? f.shape.props.length : tag + 1, ws: 0, pending: shape }, up: up.up });
      } else {
        out.push({ f: { t: T.OBJ, shape: f.shape, st: O.AFTER, phase: f.phase, ws: 0, pending: undefined }, up: up.up });
      }
      return;
    }
    case T.ARR:
      out.push({ f: { t: T.ARR, shape: f.shape, st: A.AFTER, n: f.n, ws: 0 }, up: up.up });
      return;
    case T.SEQ:
      seqAt(f.items, f.i + 1, out);
      return;
    default:
      throw new Error(`a frame of kind ${f.t} cannot hold a child`);
  }
}

/** Enters literal node `node` (after consuming its byte): a finished literal without continuations completes at once. */
function emitLit(node: LitNode, up: Thread, out: Thread[]): void {
  if (node.next.size > 0) out.push({ f: { t: T.LIT, node }, up });
  else if (node.tag >= 0) resume(up, node.tag, out);
}

function startValue(shape: Shape, up: Thread, b: number, out: Thread[], depth: number): void {
  if (depth > MAX_EPSILON_DEPTH) throw new KiwiError('API_BAD_REQUEST', 'the JSON schema refers to itself without consuming anything (a $ref loop)', { param: 'response_format' });
  switch (shape.k) {
    case 'anyOf':
      for (const alt of shape.alts) startValue(alt, up, b, out, depth + 1);
      return;
    case 'object':
      if (b === 0x7b) out.push({ f: { t: T.OBJ, shape, st: O.OPEN, phase: 0, ws: 0, pending: undefined }, up });
      return;
    case 'array':
      if (b === 0x5b) out.push({ f: { t: T.ARR, shape, st: A.OPEN, n: 0, ws: 0 }, up });
      return;
    case 'string':
      if (b === QUOTE) out.push({ f: STR_FRAMES[0]![S.BODY]!, up });
      return;
    case 'number':
      if (b === 0x2d && !shape.nonNegative) out.push({ f: { t: T.NUM, st: N.MINUS, d: 0, integer: shape.integer }, up });
      else if (b === 0x30) out.push({ f: { t: T.NUM, st: N.ZERO, d: 1, integer: shape.integer }, up });
      else if (isDigit(b)) out.push({ f: { t: T.NUM, st: N.INT, d: 1, integer: shape.integer }, up });
      return;
    case 'literal': {
      const child = shape.trie.next.get(b);
      if (child !== undefined) emitLit(child, up, out);
      return;
    }
  }
}

function keyStart(f: Extract<Frame, { t: T.OBJ }>, up: Thread | null, out: Thread[]): void {
  const parent: Thread = { f: { t: T.OBJ, shape: f.shape, st: O.KEY, phase: f.phase, ws: 0, pending: undefined }, up };
  const child = f.shape.keys[f.phase]!.next.get(QUOTE);
  if (child !== undefined) emitLit(child, parent, out);
  // Further keys come after the declared ones, once every required one is there.
  if (f.shape.extra !== undefined && f.phase > f.shape.lastRequired) out.push({ f: STR_FRAMES[1]![S.BODY]!, up: parent });
}

/** Advances one thread by one byte, pushing what survives onto `out`. */
export function stepThread(th: Thread, b: number, out: Thread[]): void {
  const f = th.f;
  switch (f.t) {
    case T.DONE:
    case T.SEQ:
      return;
    case T.VALUE:
      if (isWs(b)) {
        const ws = nextWs(f.ws, b);
        if (ws >= 0) out.push({ f: { t: T.VALUE, shape: f.shape, ws }, up: th.up });
        return;
      }
      startValue(f.shape, th.up!, b, out, 0);
      return;
    case T.STR: {
      const frames = STR_FRAMES[f.key ? 1 : 0]!;
      switch (f.st) {
        case S.BODY:
          if (b === QUOTE) resume(th.up, f.key ? -1 : 0, out);
          else if (b === BACKSLASH) out.push({ f: frames[S.ESC]!, up: th.up });
          else if (b >= 0x20) out.push(th);
          return;
        case S.ESC:
          if (b === 0x75) out.push({ f: frames[S.U1]!, up: th.up });
          else if (b === QUOTE || b === BACKSLASH || b === 0x2f || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74) out.push({ f: frames[S.BODY]!, up: th.up });
          return;
        default:
          if (isHex(b)) out.push({ f: frames[f.st === S.U4 ? S.BODY : f.st + 1]!, up: th.up });
          return;
      }
    }
    case T.NUM:
      stepNumber(f, th, b, out);
      return;
    case T.LIT: {
      const child = f.node.next.get(b);
      if (child !== undefined) emitLit(child, th.up!, out);
      if (f.node.tag >= 0) refeed(th.up, f.node.tag, b, out);
      return;
    }
    case T.OBJ:
      stepObject(f, th, b, out);
      return;
    case T.ARR:
      stepArray(f, th, b, out);
      return;
  }
}

/** A frame that ends only when a byte that cannot continue it arrives: complete it and give that byte to what follows. */
function refeed(up: Thread | null, tag: number, b: number, out: Thread[]): void {
  const resumed: Thread[] = [];
  resume(up, tag, resumed);
  for (const r of resumed) stepThread(r, b, out);
}

function stepNumber(f: Extract<Frame, { t: T.NUM }>, th: Thread, b: number, out: Thread[]): void {
  const to = (st: N, d: number) => out.push({ f: { t: T.NUM, st, d, integer: f.integer }, up: th.up });
  const digit = isDigit(b);
  switch (f.st) {
    case N.MINUS:
      if (b === 0x30) to(N.ZERO, 1);
      else if (digit) to(N.INT, 1);
      return;
    case N.ZERO:
    case N.INT:
      if (digit && f.st === N.INT && f.d < MAX_INT_DIGITS) to(N.INT, f.d + 1);
      else if (b === 0x2e && !f.integer) to(N.DOT, 0);
      else if ((b === 0x65 || b === 0x45) && !f.integer) to(N.E, 0);
      else if (!digit) refeed(th.up, 0, b, out);
      return;
    case N.DOT:
      if (digit) to(N.FRAC, 1);
      return;
    case N.FRAC:
      if (digit) {
        if (f.d < MAX_FRAC_DIGITS) to(N.FRAC, f.d + 1);
      } else if (b === 0x65 || b === 0x45) to(N.E, 0);
      else refeed(th.up, 0, b, out);
      return;
    case N.E:
      if (b === 0x2b || b === 0x2d) to(N.ESIGN, 0);
      else if (digit) to(N.EXP, 1);
      return;
    case N.ESIGN:
      if (digit) to(N.EXP, 1);
      return;
    case N.EXP:
      if (digit) {
        if (f.d < MAX_EXP_DIGITS) to(N.EXP, f.d + 1);
      } else refeed(th.up, 0, b, out);
      return;
  }
}

function stepObject(f: Extract<Frame, { t: T.OBJ }>, th: Thread, b: number, out: Thread[]): void {
  const s = f.shape;
  if (isWs(b)) {
    const ws = nextWs(f.ws, b);
    if (ws >= 0 && f.st !== O.KEY && f.st !== O.VAL) out.push({ f: { ...f, ws }, up: th.up });
    return;
  }
  const canClose = f.phase > s.lastRequired;
  switch (f.st) {
    case O.OPEN:
      if (b === 0x7d && canClose) resume(th.up, 0, out);
      else if (b === QUOTE) keyStart(f, th.up, out);
      return;
    case O.COMMA:
      if (b === QUOTE) keyStart(f, th.up, out);
      return;
    case O.COLON:
      if (b === 0x3a) out.push({ f: { t: T.VALUE, shape: f.pending!, ws: 0 }, up: { f: { t: T.OBJ, shape: s, st: O.VAL, phase: f.phase, ws: 0, pending: undefined }, up: th.up } });
      return;
    case O.AFTER:
      if (b === 0x7d && canClose) resume(th.up, 0, out);
      else if (b === 0x2c && (f.phase < s.props.length || s.extra !== undefined)) out.push({ f: { t: T.OBJ, shape: s, st: O.COMMA, phase: f.phase, ws: 0, pending: undefined }, up: th.up });
      return;
    default:
      return; // KEY and VAL always have a child above them
  }
}

function stepArray(f: Extract<Frame, { t: T.ARR }>, th: Thread, b: number, out: Thread[]): void {
  const s = f.shape;
  if (isWs(b)) {
    const ws = nextWs(f.ws, b);
    if (ws >= 0 && f.st !== A.VAL) out.push({ f: { ...f, ws }, up: th.up });
    return;
  }
  switch (f.st) {
    case A.OPEN:
      if (b === 0x5d && s.minItems === 0) resume(th.up, 0, out);
      else if (s.maxItems > 0) startValue(s.items, { f: { t: T.ARR, shape: s, st: A.VAL, n: 1, ws: 0 }, up: th.up }, b, out, 0);
      return;
    case A.COMMA:
      startValue(s.items, { f: { t: T.ARR, shape: s, st: A.VAL, n: f.n + 1, ws: 0 }, up: th.up }, b, out, 0);
      return;
    case A.AFTER:
      if (b === 0x5d && f.n >= s.minItems) resume(th.up, 0, out);
      else if (b === 0x2c && f.n < s.maxItems) out.push({ f: { t: T.ARR, shape: s, st: A.COMMA, n: f.n, ws: 0 }, up: th.up });
      return;
    default:
      return;
  }
}

/** The state after `b`, or an empty state. */
export function step(state: AutomatonState, b: number): Thread[] {
  const out: Thread[] = [];
  for (const th of state) stepThread(th, b, out);
  if (out.length > 1) return dedupe(out);
  return out;
}

function dedupe(threads: Thread[]): Thread[] {
  const unique = [...new Set(threads)];
  if (unique.length > MAX_THREADS) throw new KiwiError('API_BAD_REQUEST', `the JSON schema is too ambiguous to decode (more than ${MAX_THREADS} ways to read the same text); simplify its anyOf alternatives`, { param: 'response_format' });
  return unique;
}

export function stepBytes(state: AutomatonState, bytes: Uint8Array): Thread[] {
  let s = state as Thread[];
  for (const b of bytes) {
    s = step(s, b);
    if (s.length === 0) break;
  }
  return s;
}

/** Whether the text so far is a complete sentence of the grammar (end of generation allowed here). */
export function canEnd(state: AutomatonState): boolean {
  return state.some(threadCanEnd);
}

function threadCanEnd(th: Thread): boolean {
  const f = th.f;
  if (f.t === T.DONE) return true;
  let tag: number;
  if (f.t === T.NUM && (f.st === N.ZERO || f.st === N.INT || f.st === N.FRAC || f.st === N.EXP)) tag = 0;
  else if (f.t === T.LIT && f.node.tag >= 0) tag = f.node.tag;
  else return false;
  const resumed: Thread[] = [];
  resume(th.up, tag, resumed);
  return resumed.some(threadCanEnd);
}

/** Whether nothing but the end can follow (every thread is past the last item). */
export function isFinished(state: AutomatonState): boolean {
  return state.length > 0 && state.every((th) => th.f.t === T.DONE);
}

/** Whether a thread sits inside a plain JSON string body, where any byte but `"`, `\` and controls keeps it there unchanged. */
export function inStringBody(th: Thread): boolean {
  return th.f.t === T.STR && th.f.st === S.BODY;
}

/** Accepts `text` whole (tests and validation of a finished output). */
export function acceptsText(grammar: JsonGrammar, text: string): boolean {
  const s = stepBytes(grammar.initial(), new TextEncoder().encode(text));
  return canEnd(s);
}
