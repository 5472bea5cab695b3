// Streaming parser of a model's tool calls in its family's syntax (tool-syntax.ts): text pieces in,
// content to show and finished calls out. It holds back only what may still turn out to be a call
// (a prefix of `<tool_call>`, or an answer that opens like a Llama/Mistral call), so plain answers
// stream as they come, and the result does not depend on how the text was split. A would-be call
// that does not parse is content, never lost. Pure.
import type { ToolSyntax } from '../../completion/tool-syntax.js';

export interface ParsedCall {
  name: string;
  /** The arguments as a JSON text (OpenAI's `function.arguments`). */
  arguments: string;
}

export interface ParsedPiece {
  content: string;
  calls: ParsedCall[];
}

export interface ToolCallParser {
  push(text: string): ParsedPiece;
  /** The end of the output: whatever was held back, as content or calls. */
  finish(): ParsedPiece;
}

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/** A call object `{"name": .., "arguments"|"parameters": {..}}`, or undefined. */
function callOf(value: unknown): ParsedCall | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const o = value as Record<string, unknown>;
  if (typeof o.name !== 'string' || o.name === '') return undefined;
  let args = o.arguments ?? o.parameters ?? {};
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args)) return undefined;
  return { name: o.name, arguments: JSON.stringify(args) };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Calls written as one object, an array of objects, or objects separated by `;` or newlines (Llama 3.x). */
function callsOf(text: string): ParsedCall[] | undefined {
  const whole = parseJson(text.trim());
  const list = Array.isArray(whole) ? whole : whole !== undefined ? [whole] : undefined;
  if (list !== undefined) {
    const calls = list.map(callOf);
    return calls.length > 0 && calls.every((c) => c !== undefined) ? (calls as ParsedCall[]) : undefined;
  }
  const parts = text.split(/;\s*|\n+(?=\s*\{)/).filter((p) => p.trim() !== '');
  if (parts.length < 2) return undefined;
  const calls = parts.map((p) => callOf(parseJson(p.trim())));
  return calls.every((c) => c !== undefined) ? (calls as ParsedCall[]) : undefined;
}

/** The length of the longest suffix of `text` that is a proper prefix of `tag`. */
function heldPrefix(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (tag.startsWith(text.slice(text.length - n))) return n;
  return 0;
}

/** `<tool_call>` ... `</tool_call>` anywhere in the text (Hermes, Qwen, and the generic syntax). */
class TaggedParser implements ToolCallParser {
  private buf = '';
  private inCall = false;

  push(text: string): ParsedPiece {
    this.buf += text;
    const out: ParsedPiece = { content: '', calls: [] };
    for (;;) {
      if (!this.inCall) {
        const at = this.buf.indexOf(OPEN);
        if (at < 0) {
          const hold = heldPrefix(this.buf, OPEN);
          out.content += this.buf.slice(0, this.buf.length - hold);
          this.buf = this.buf.slice(this.buf.length - hold);
          return out;
        }
        out.content += this.buf.slice(0, at);
        this.buf = this.buf.slice(at);
        this.inCall = true;
      }
      const end = this.buf.indexOf(CLOSE);
      if (end < 0) return out;
      const raw = this.buf.slice(0, end + CLOSE.length);
      this.buf = this.buf.slice(end + CLOSE.length);
      this.inCall = false;
      const calls = callsOf(raw.slice(OPEN.length, raw.length - CLOSE.length));
      if (calls !== undefined) out.calls.push(...calls);
      else out.content += raw;
    }
  }

  finish(): ParsedPiece {
    const rest = this.buf;
    this.buf = '';
    if (this.inCall) {
      this.inCall = false;
      // A call cut off before its closing tag (the model ended its turn there) still counts when it parses.
      const calls = callsOf(rest.slice(OPEN.length));
      if (calls !== undefined) return { content: '', calls };
    }
    return { content: rest, calls: [] };
  }
}

/** The whole answer is the call(s) when it opens with one of `triggers` (Llama 3.x `{`, Mistral `[TOOL_CALLS]` / `[`). */
class LeadingParser implements ToolCallParser {
  private buf = '';
  private mode: 'undecided' | 'text' | 'call' = 'undecided';

  constructor(private readonly triggers: readonly string[]) {}

  push(text: string): ParsedPiece {
    if (this.mode === 'text') return { content: text, calls: [] };
    this.buf += text;
    if (this.mode === 'call') return { content: '', calls: [] };
    const lead = this.buf.trimStart();
    if (lead === '') return { content: '', calls: [] };
    if (this.triggers.some((t) => lead.startsWith(t))) {
      this.mode = 'call';
      return { content: '', calls: [] };
    }
    if (this.triggers.some((t) => t.startsWith(lead))) return { content: '', calls: [] };
    this.mode = 'text';
    const content = this.buf;
    this.buf = '';
    return { content, calls: [] };
  }

  finish(): ParsedPiece {
    const rest = this.buf;
    this.buf = '';
    if (this.mode === 'call') {
      let body = rest.trimStart();
      for (const prefix of ['<|python_tag|>', '[TOOL_CALLS]']) if (body.startsWith(prefix)) body = body.slice(prefix.length);
      const calls = callsOf(body);
      if (calls !== undefined) return { content: '', calls };
    }
    return { content: rest, calls: [] };
  }
}

export function createToolCallParser(syntax: ToolSyntax): ToolCallParser {
  switch (syntax) {
    case 'hermes':
    case 'generic':
      return new TaggedParser();
    case 'llama3':
      return new LeadingParser(['<|python_tag|>', '{']);
    case 'mistral':
      return new LeadingParser(['[TOOL_CALLS]', '[{"']);
  }
}
