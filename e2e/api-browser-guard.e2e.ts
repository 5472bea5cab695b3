// Web pages against `kiwi serve` in real Chromium: a page from another origin (http://127.0.0.2)
// cannot make the API generate (its text/plain form post gets 415, its JSON fetch fails the CORS
// preflight), a DNS-rebinding page (evil.example resolved to 127.0.0.1, so same-origin with the API)
// is refused by the Host check, and a page on a local origin streams a chat through CORS. /health's
// generation counts prove that no refused request started one.
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { kiwiEntry, ProcessSet, waitEvent } from '../electron/engine/test-support/processes.js';
import { CHROMIUM } from './support/browser.js';

const procs = new ProcessSet();
const pageServers: Server[] = [];
let browser: Browser | undefined;
let context: BrowserContext;
let apiPort: number;
let apiUrl: string;

/** A page server: any path answers a blank HTML page (the test drives it with page.evaluate). */
async function startPageServer(host: string): Promise<string> {
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>page</title><body></body>'));
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  pageServers.push(server);
  return `http://${host}:${(server.address() as AddressInfo).port}`;
}

interface Generations {
  completed: number;
  cancelled: number;
  failed: number;
}

async function generations(): Promise<Generations> {
  const health = (await (await fetch(`http://127.0.0.1:${apiPort}/health`)).json()) as { generations: Generations };
  return health.generations;
}

const CHAT = { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, temperature: 0 };

beforeAll(async () => {
  const model = await testModelPath('stories260K.gguf');
  const serve = procs.spawn(process.execPath, [...kiwiEntry(), 'serve', '--model', model, '--port', '0', '--threads', '1', '--no-shard-cache', '--json']);
  const serving = await waitEvent(serve, (e) => e.event === 'serving', 'kiwi serve serving', 60_000);
  apiUrl = serving.url as string;
  apiPort = serving.port as number;
  // The launch of support/browser.ts, plus a resolver rule that plays the rebinding DNS server.
  if (!existsSync(CHROMIUM)) throw new Error(`No Chromium at ${CHROMIUM}. Install Debian's: apt-get install -y chromium (or set KIWI_CHROMIUM).`);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--host-resolver-rules=MAP evil.example 127.0.0.1'],
  });
  context = await browser.newContext();
});

afterAll(async () => {
  await browser?.close();
  for (const s of pageServers) await new Promise((r) => s.close(r));
  procs.dispose();
});

describe('a page on another origin', () => {
  let foreign: string;
  beforeAll(async () => {
    foreign = await startPageServer('127.0.0.2');
  });

  it('cannot make the API generate with a simple form post (415)', async () => {
    const before = await generations();
    const page = await context.newPage();
    await page.goto(foreign);
    // The classic CSRF: enctype text/plain turns name=value into a JSON-looking body, no preflight.
    const answer = page.waitForResponse((r) => r.url() === `${apiUrl}/chat/completions`);
    await page.evaluate(({ action, body }) => {
      const form = document.createElement('form');
      form.method = 'POST';
      form.action = action;
      form.enctype = 'text/plain';
      const input = document.createElement('input');
      input.name = body.slice(0, -2);
      input.value = '"}';
      form.append(input);
      document.body.append(form);
      form.submit();
    }, { action: `${apiUrl}/chat/completions`, body: JSON.stringify({ ...CHAT, pad: '' }) });
    const res = await answer;
    expect(res.status()).toBe(415);
    expect(await res.request().headerValue('content-type')).toBe('text/plain');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unsupported_media_type');
    expect(await generations()).toEqual(before);
    await page.close();
  });

  it('cannot fetch with JSON: the CORS preflight is refused', async () => {
    const before = await generations();
    const page = await context.newPage();
    await page.goto(foreign);
    const outcome = await page.evaluate(async ({ url, body }) => {
      try {
        const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        return `answered ${res.status}`;
      } catch (err) {
        return `failed: ${(err as Error).name}`;
      }
    }, { url: `${apiUrl}/chat/completions`, body: JSON.stringify(CHAT) });
    expect(outcome).toBe('failed: TypeError');
    // What the browser asked first, asked directly: refused, with no Access-Control-Allow-Origin.
    const preflight = await fetch(`${apiUrl}/chat/completions`, {
      method: 'OPTIONS', headers: { origin: foreign, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    expect(preflight.status).toBe(403);
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    expect(await generations()).toEqual(before);
    await page.close();
  });
});

describe('a DNS-rebinding page', () => {
  it('is refused by the Host check although it is same-origin with the API', async () => {
    const before = await generations();
    const page = await context.newPage();
    // After rebinding, evil.example resolves to 127.0.0.1: the attacker's page and the API share an
    // origin, so no CORS applies. (Loading the page from Kiwi itself keeps Chromium's own Private
    // Network Access block out of the way: the Host check must hold in browsers without it.)
    const evil = `http://evil.example:${apiPort}`;
    const document = await page.goto(`${evil}/`);
    expect(document?.status()).toBe(403);
    const answer = await page.evaluate(async (body) => {
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return { status: res.status, body: await res.text() };
    }, JSON.stringify(CHAT));
    expect(answer.status).toBe(403);
    expect((JSON.parse(answer.body) as { error: { code: string } }).error.code).toBe('host_not_allowed');
    const models = await page.evaluate(async () => (await fetch('/v1/models')).status);
    expect(models).toBe(403);
    expect(await generations()).toEqual(before);
    await page.close();
  });
});

describe('a page on a local origin', () => {
  it('streams a chat through CORS', async () => {
    const before = await generations();
    const local = await startPageServer('127.0.0.1');
    expect(local).not.toBe(`http://127.0.0.1:${apiPort}`);
    const page = await context.newPage();
    await page.goto(local);
    const streamed = await page.evaluate(async ({ url, body }) => {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer unused' }, body });
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      let reads = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        reads++;
        text += decoder.decode(value, { stream: true });
      }
      return { status: res.status, type: res.headers.get('content-type'), text, reads };
    }, { url: `${apiUrl}/chat/completions`, body: JSON.stringify({ ...CHAT, stream: true }) });
    expect(streamed.status).toBe(200);
    expect(streamed.type).toMatch(/text\/event-stream/);
    expect(streamed.text).toContain('"object":"chat.completion.chunk"');
    expect(streamed.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const after = await generations();
    expect(after.completed).toBe(before.completed + 1);
    await page.close();
  });
});
