// The shape of one `kiwi` subcommand: its options (with the help text shown by --help) and what it
// runs. Commands write results to ctx.stdout and return an exit code; errors are thrown as
// KiwiError and turned into a message (or a JSON error object with --json) by cli.ts.
import type { Writable } from 'node:stream';

export interface OptionSpec {
  type: 'string' | 'boolean';
  description: string;
  /** Placeholder shown in help, e.g. `N` in `--max-tokens N`. */
  valueName?: string;
  short?: string;
  default?: string | boolean;
  multiple?: boolean;
}

export interface PositionalSpec {
  name: string;
  description: string;
  optional?: boolean;
  /** Takes every remaining positional (joined with spaces by the command if it wants). */
  rest?: boolean;
}

export interface CommandContext {
  values: Record<string, string | boolean | string[] | boolean[] | undefined>;
  positionals: string[];
  stdout: Writable;
  stderr: Writable;
  signal: AbortSignal;
}

export interface Command {
  name: string;
  summary: string;
  /** Longer explanation shown by `kiwi <cmd> --help`. */
  description?: string;
  positionals: PositionalSpec[];
  options: Record<string, OptionSpec>;
  run(ctx: CommandContext): Promise<number>;
}

export function defineCommand(command: Command): Command {
  return command;
}

/** Writes one JSON value as one line (the CLI's --json contract). */
export function writeJson(out: Writable, value: unknown): void {
  out.write(`${JSON.stringify(value)}\n`);
}

export function stringOption(ctx: CommandContext, name: string): string | undefined {
  const v = ctx.values[name];
  return typeof v === 'string' ? v : undefined;
}

export function booleanOption(ctx: CommandContext, name: string): boolean {
  return ctx.values[name] === true;
}
