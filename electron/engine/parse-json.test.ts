import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isKiwiError } from './errors.js';
import { parseJson, validated, type JsonErrors } from './parse-json.js';

const Point = z.strictObject({ x: z.number(), y: z.number() });
const errors: JsonErrors = {
  code: 'CONTROL_MALFORMED',
  notJson: (reason) => `not JSON (${reason})`,
  invalid: (issues) => `malformed: ${issues.join('; ')}`,
};

function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

describe('parseJson', () => {
  it('returns the parsed, validated value', () => {
    expect(parseJson(Point, '{"x":1,"y":2}', errors)).toEqual({ x: 1, y: 2 });
  });

  it('refuses text that is not JSON with the caller code and the parser reason', () => {
    const err = thrown(() => parseJson(Point, '{"x":', errors));
    expect(isKiwiError(err, 'CONTROL_MALFORMED')).toBe(true);
    expect((err as Error).message).toMatch(/^not JSON \(.+\)$/);
  });

  it('refuses JSON the schema does not accept, naming every issue by path', () => {
    const err = thrown(() => parseJson(Point, '{"x":"1"}', errors));
    expect(isKiwiError(err, 'CONTROL_MALFORMED')).toBe(true);
    expect((err as Error).message).toMatch(/^malformed: x: .+; y: .+$/);
  });

  it('names an issue of the whole value by the root name', () => {
    const err = thrown(() => validated(Point, 7, { code: 'USAGE', invalid: ([first]) => `bad ${first}`, root: 'body' }));
    expect(isKiwiError(err, 'USAGE')).toBe(true);
    expect((err as Error).message).toMatch(/^bad body: /);
  });
});
