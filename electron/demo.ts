// `npm run demo`: a whole Kiwi ring on this machine, so a newcomer sees it work at once: a
// rendezvous, a host serving the OpenAI-compatible API, and two members (`friend-1` with its own
// copy of the model, `friend-2` receiving its layers from the host), each a separate `kiwi`
// process, exactly as on separate PCs. Uses $KIWI_MODEL, else downloads a tiny story model
// (stories260K, 1 MB, pinned sha256) into the cache once. Ctrl-C stops everything.
import { spawn, type ChildProcess } from 'node:child_process';
import { access } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { downloadFile, formatProgress } from './engine/model/download.js';
import { TEST_MODEL_CATALOG } from './engine/model/test-model-catalog.js';
import { kiwiCacheDir } from './engine/paths.js';

const DEFAULT_MODEL = 'stories260K.gguf';
const root = resolve(import.meta.dirname, '..');
const children: ChildProcess[] = [];

async function exists(path: string): Promise<boolean> {
  return access(path).then(() => true, () => false);
}

async function resolveModel(): Promise<string> {
  const given = process.env.KIWI_MODEL;
  if (given) {
    if (!(await exists(given))) throw new Error(`KIWI_MODEL=${given} does not exist. Set it to the path of a GGUF file.`);
    return given;
  }
  const dest = join(kiwiCacheDir(), 'models', DEFAULT_MODEL);
  if (await exists(dest)) return dest;
  const entry = TEST_MODEL_CATALOG[DEFAULT_MODEL]!;
  process.stderr.write(`Downloading the demo model ${DEFAULT_MODEL} from ${entry.url}\n`);
  try {
    await downloadFile({
      url: entry.url, dest, sha256: entry.sha256, expectedBytes: entry.bytes,
      onProgress: (p) => process.stderr.write(`\r${formatProgress(DEFAULT_MODEL, p)}`),
    });
    process.stderr.write('\n');
  } catch (err) {
    throw new Error(
      `Could not download the demo model (${(err as Error).message}). Without internet access, set KIWI_MODEL to a GGUF file, ` +
        'e.g. KIWI_MODEL=/path/to/model.gguf npm run demo',
    );
  }
  return dest;
}

/** Starts `kiwi ARGS --json` and calls onEvent for each JSON line it prints. */
function kiwi(label: string, args: string[], onEvent: (e: Record<string, unknown>) => void): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'electron/kiwi.ts'), ...args, '--json'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  createInterface({ input: child.stdout! }).on('line', (line) => {
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    onEvent(event);
  });
  createInterface({ input: child.stderr! }).on('line', (line) => process.stderr.write(`[${label}] ${line}\n`));
  child.once('exit', (code, signal) => {
    if (!stopping) {
      process.stderr.write(`[${label}] exited (${signal ?? code}); stopping the demo\n`);
      stop(1);
    }
  });
  return child;
}

let stopping = false;
function stop(code: number): void {
  if (stopping) return;
  stopping = true;
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
  setTimeout(() => process.exit(code), 1500).unref();
}

function say(text: string): void {
  process.stdout.write(`${text}\n`);
}

async function main(): Promise<void> {
  const model = await resolveModel();
  const port = process.env.KIWI_PORT ?? '8080';
  say(`Model: ${model}`);
  const rendezvous = await new Promise<string>((done) => {
    kiwi('rendezvous', ['rendezvous', '--host', '127.0.0.1', '--port', '0'], (e) => {
      if (e.event === 'listening') done(e.url as string);
    });
  });
  say(`Rendezvous: ${rendezvous}`);
  kiwi('host', ['host', '--model', model, '--port', port, '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--rendezvous-host', '127.0.0.1', '--listen', '127.0.0.1'], (e) => {
    switch (e.event) {
      case 'session':
        say(`Session code: ${String(e.code)} (friends would type: kiwi join ${String(e.code)} --rendezvous ${rendezvous})`);
        startMember('friend-1', e.code as string, rendezvous, ['--model', model]);
        startMember('friend-2', e.code as string, rendezvous, []);
        break;
      case 'member-joined':
        say(`${String(e.name)} joined`);
        break;
      case 'plan':
        say(`Plan: ${(e.stages as Array<{ device: string; start: number; end: number }>).map((s) => `${s.device} layers ${s.start}-${s.end}`).join(' → ')} → back to host`);
        break;
      case 'stage-ready':
        say(`${String(e.name)} loaded its layers (${String(e.source)}${e.transferred_bytes ? `, ${String(e.transferred_bytes)} bytes from the host` : ''})`);
        break;
      case 'serving':
        say(`\nKiwi is serving the OpenAI-compatible API at ${String(e.url)}\n`);
        say(`Try:\n  curl ${String(e.url)}/chat/completions -H 'content-type: application/json' \\\n    -d '{"model":"${model.split('/').pop()!.replace(/\.gguf$/i, '')}","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":64}'\n`);
        say('Press Ctrl-C to stop.');
        break;
      case 'error':
        say(`Host error ${String(e.code)}: ${String(e.message)}`);
        break;
    }
  });
}

function startMember(name: string, code: string, rendezvous: string, extra: string[]): void {
  kiwi(name, ['join', code, '--rendezvous', rendezvous, '--name', name, '--listen', '127.0.0.1', ...extra], (e) => {
    if (e.event === 'error') say(`${name} error ${String(e.code)}: ${String(e.message)}`);
  });
}

process.on('SIGINT', () => stop(0));
process.on('SIGTERM', () => stop(0));
main().catch((err: unknown) => {
  process.stderr.write(`kiwi demo: ${(err as Error).message}\n`);
  stop(1);
  process.exitCode = 1;
});
