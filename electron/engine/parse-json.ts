// The one way engine code turns untrusted JSON text (a peer's message, a request body, a file the
// user names) into a typed value: JSON.parse, then a zod schema, and either failure becomes a
// KiwiError with the caller's code and wording. Beside errors.ts at the bottom of the engine.
import type { z } from 'zod';
import { KiwiError, type KiwiErrorCode } from './errors.js';

export interface JsonErrors {
  /** The code of both failures. */
  code: KiwiErrorCode;
  /** The message for text that is not JSON, given the parser's reason. */
  notJson: (reason: string) => string;
  /** The message for JSON the schema refuses, given its issues as `path: problem` (at least one). */
  invalid: (issues: readonly [string, ...string[]]) => string;
  /** What an issue's path is called when it is the whole value; default 'message'. */
  root?: string;
}

/** `value` checked against `schema`; a refusal throws `errors.code` with `errors.invalid(...)`. */
export function validated<S extends z.ZodType>(schema: S, value: unknown, errors: Pick<JsonErrors, 'code' | 'invalid' | 'root'>): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const root = errors.root ?? 'message';
  const issues = r.error.issues.map((i) => `${i.path.join('.') || root}: ${i.message}`);
  throw new KiwiError(errors.code, errors.invalid(issues.length > 0 ? (issues as [string, ...string[]]) : [`${root}: invalid`]));
}

/** `text` parsed as JSON and checked against `schema`; either failure throws `errors.code`. */
export function parseJson<S extends z.ZodType>(schema: S, text: string, errors: JsonErrors): z.output<S> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new KiwiError(errors.code, errors.notJson((err as Error).message));
  }
  return validated(schema, value, errors);
}
