// The API tokenizes long prompts on a worker thread: while it works through a prompt of a few
// hundred KB for a model with a 64K context (random weights, a 512-token SentencePiece vocabulary),
// the same server keeps answering other requests.
import { mkdtemp, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { kiwiEntry } from '../test-support/processes.js';
import { startOpenAiServer, type OpenAiServer } from './http-server.js';
import { LocalBackend } from './local-backend.js';
import { execFileSync } from 'node:child_process';

let dir: string;
let backend: LocalBackend;
let server: OpenAiServer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-off-loop-'));
  const model = join(dir, 'tiny-long.gguf');
  const shape = { name: 'tiny-long', architecture: 'llama', blockCount: 1, embeddingLength: 64, headCount: 2, headCountKv: 1, feedForwardLength: 128, vocabSize: 512, contextLength: 65536 };
  execFileSync(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'f32', '--out', model], { stdio: 'ignore' });
  backend = await LocalBackend.open(model, { threads: 1, maxPositions: 65536, kvBudgetBytes: 64 * 1024 * 1024 });
  server = await startOpenAiServer(backend, { port: 0 });
});
afterAll(async () => {
  await server?.close();
  await backend?.close();
  await rm(dir, { recursive: true, force: true });
});

function post(path: string, body: string): { written: Promise<void>; answered: Promise<number> } {
  let written!: () => void;
  const writtenP = new Promise<void>((r) => (written = r));
  const answered = new Promise<number>((resolve, reject) => {
    const req = httpRequest(`http://127.0.0.1:${server.port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body, () => written());
  });
  return { written: writtenP, answered };
}

/** /health answers while `big` (written, not yet answered) is being tokenized; then big's status. */
async function answeredMeanwhile(big: ReturnType<typeof post>): Promise<number> {
  let bigDone = false;
  void big.answered.then(() => (bigDone = true));
  await big.written;
  const health = await fetch(`http://127.0.0.1:${server.port}/health`);
  expect(health.status).toBe(200);
  expect(bigDone).toBe(false);
  return big.answered;
}

it('answers other requests while it tokenizes a long prompt', async () => {
  expect(backend.contextTokens).toBe(65536);
  // About 350 KB: under the byte bound of the context (64K tokens of at most 6 bytes), over the context in tokens.
  const status = await answeredMeanwhile(post('/v1/completions', JSON.stringify({ prompt: 'Once upon a time there was a girl. '.repeat(10_000), max_tokens: 1 })));
  expect(status).toBe(400); // it needs more tokens than the context holds, as it learns after tokenizing
});

it('answers other requests while POST /tokenize encodes a long text, with the ids encode() gives', async () => {
  const text = 'Once upon a time there was a girl. '.repeat(10_000);
  expect(await answeredMeanwhile(post('/tokenize', JSON.stringify({ content: text })))).toBe(200);
  const r = await fetch(`http://127.0.0.1:${server.port}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: text.slice(0, 20_000) }) });
  const { tokens } = (await r.json()) as { tokens: number[] };
  expect(tokens).toEqual(backend['loaded']!.model.tokenizer.encode(text.slice(0, 20_000), { addBos: false, parseSpecial: true }));
});
