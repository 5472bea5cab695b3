// `npm run demo`: a whole Kiwi ring on this machine, so a newcomer sees it work at once: a
// rendezvous, a host serving the OpenAI-compatible API, and two members (`friend-1` with its own
// copy of the model, `friend-2` receiving its layers from the host), each a separate `kiwi`
// process, exactly as on separate PCs. Uses $KIWI_MODEL, else the embedded tiny story model
// (models/stories260K.gguf, 1.2 MB): no download. Ctrl-C stops everything.
import { spawn, type ChildProcess } from 'node:child_process';
import { access } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { defaultModelPath } from './engine/paths.js';

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
  const embedded = defaultModelPath();
  if (embedded === undefined) throw new Error('The embedded model models/stories260K.gguf is missing from this checkout; set KIWI_MODEL to a GGUF file.');
  return embedded;
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
        // stories260K continues stories; it is no chat model, so the example is a plain completion.
        say(`Try:\n  curl ${String(e.url)}/completions -H 'content-type: application/json' \\\n    -d '{"model":"${model.split('/').pop()!.replace(/\.gguf$/i, '')}","prompt":"Once upon a time","max_tokens":64}'\n`);
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
