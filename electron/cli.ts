// `kiwi`: the command-line face of the headless engine. Each subcommand lives in
// electron/commands/<name>.ts; this file parses arguments, prints help and converts errors.
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import { KiwiError } from './engine/errors.js';
import type { Command, OptionSpec } from './commands/command.js';
import { writeJson } from './commands/command.js';
import { commands } from './commands/index.js';

interface Io {
  stdout: Writable;
  stderr: Writable;
  signal?: AbortSignal;
}

export async function main(argv: string[], io: Io = { stdout: process.stdout, stderr: process.stderr }): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.stdout.write(globalHelp());
    return name === undefined ? 1 : 0;
  }
  if (name === '--version' || name === '-v') {
    io.stdout.write(`${await packageVersion()}\n`);
    return 0;
  }
  const command = commands.find((c) => c.name === name);
  if (command === undefined) {
    io.stderr.write(`kiwi: unknown command '${name}'. Run 'kiwi --help' to see the commands.\n`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    io.stdout.write(commandHelp(command));
    return 0;
  }

  const json = rest.includes('--json');
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: rest,
      options: toParseArgsOptions(command.options),
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    return reportError(new KiwiError('USAGE', `${(err as Error).message}. Run 'kiwi ${name} --help'.`), json, io);
  }
  const required = command.positionals.filter((p) => p.optional !== true).length;
  if (parsed.positionals.length < required) {
    const missing = command.positionals[parsed.positionals.length];
    return reportError(
      new KiwiError('USAGE', `missing <${missing?.name ?? 'argument'}>. Run 'kiwi ${name} --help'.`),
      json,
      io,
    );
  }
  const takesRest = command.positionals.some((p) => p.rest === true);
  if (!takesRest && parsed.positionals.length > command.positionals.length) {
    return reportError(
      new KiwiError('USAGE', `unexpected argument '${parsed.positionals[command.positionals.length]}'. Run 'kiwi ${name} --help'.`),
      json,
      io,
    );
  }

  const controller = new AbortController();
  const onSignal = (): void => controller.abort();
  io.signal?.addEventListener('abort', onSignal, { once: true });
  try {
    return await command.run({
      values: parsed.values as Record<string, string | boolean | string[] | boolean[] | undefined>,
      positionals: parsed.positionals,
      stdout: io.stdout,
      stderr: io.stderr,
      signal: controller.signal,
    });
  } catch (err) {
    return reportError(err, json, io);
  } finally {
    io.signal?.removeEventListener('abort', onSignal);
  }
}

function reportError(err: unknown, json: boolean, io: Io): number {
  if (err instanceof KiwiError) {
    if (json) writeJson(io.stdout, { error: err.toJSON() });
    io.stderr.write(`kiwi: ${err.message}\n`);
    return err.code === 'USAGE' ? 2 : 1;
  }
  // Not an expected failure: show the stack so the bug can be found.
  io.stderr.write(`kiwi: internal error: ${(err as Error)?.stack ?? String(err)}\n`);
  return 70;
}

function toParseArgsOptions(options: Record<string, OptionSpec>) {
  const out: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean; default?: string | boolean }> = {};
  for (const [key, spec] of Object.entries(options)) {
    out[key] = { type: spec.type };
    if (spec.short !== undefined) out[key].short = spec.short;
    if (spec.multiple === true) out[key].multiple = true;
    if (spec.default !== undefined) out[key].default = spec.default;
  }
  return out;
}

function globalHelp(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const lines = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return [
    'kiwi — run a large language model together on your friends\' PCs',
    '',
    'Usage: kiwi <command> [options]',
    '',
    'Commands:',
    ...lines,
    '',
    "Run 'kiwi <command> --help' for the options of one command.",
    '',
  ].join('\n');
}

export function commandHelp(command: Command): string {
  const usage = [
    `kiwi ${command.name}`,
    ...command.positionals.map((p) => (p.optional === true ? `[${p.name}]` : `<${p.name}>`)),
    ...Object.keys(command.options).length > 0 ? ['[options]'] : [],
  ].join(' ');
  const optionRows = Object.entries(command.options).map(([key, spec]) => {
    const flag = `${spec.short !== undefined ? `-${spec.short}, ` : ''}--${key}${spec.type === 'string' ? ` ${spec.valueName ?? 'VALUE'}` : ''}`;
    const def = spec.default !== undefined && spec.default !== false ? ` (default: ${String(spec.default)})` : '';
    return [flag, `${spec.description}${def}`] as const;
  });
  const posRows = command.positionals.map((p) => [`<${p.name}>`, p.description] as const);
  const width = Math.max(10, ...[...optionRows, ...posRows].map(([f]) => f.length));
  const fmt = (rows: ReadonlyArray<readonly [string, string]>): string[] => rows.map(([f, d]) => `  ${f.padEnd(width)}  ${d}`);
  return [
    `Usage: ${usage}`,
    '',
    command.summary,
    ...(command.description !== undefined ? ['', command.description] : []),
    ...(posRows.length > 0 ? ['', 'Arguments:', ...fmt(posRows)] : []),
    ...(optionRows.length > 0 ? ['', 'Options:', ...fmt(optionRows)] : []),
    `  ${'-h, --help'.padEnd(width)}  Show this help`,
    '',
  ].join('\n');
}

async function packageVersion(): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  // From electron/cli.ts (tests) the package root is one level up, from dist/electron/cli.js two.
  for (const relative of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(await readFile(new URL(relative, import.meta.url), 'utf8')) as { name?: string; version: string };
      if (pkg.name === 'kiwi') return pkg.version;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  throw new Error('package.json of kiwi not found next to the CLI');
}
