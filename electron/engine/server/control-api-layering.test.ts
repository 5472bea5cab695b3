// Proves the lint rule that keeps common/ (the control API's wire types) free of both sides fires.
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const eslint = new ESLint({ cwd: process.cwd() });

async function lint(code: string, filePath: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).map((m) => `${m.ruleId}: ${m.message}`);
}

describe('common/ layering lint', () => {
  it('refuses electron, engine and renderer imports in common/', async () => {
    expect(await lint("import { app } from 'electron';\nexport const a = app;\n", 'common/x.ts')).toEqual([expect.stringMatching(/no-restricted-imports: .*no electron/)]);
    expect(await lint("import { KiwiError } from '../electron/engine/errors.js';\nexport const a = KiwiError;\n", 'common/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*neither electron/),
    ]);
    expect(await lint("import { App } from '../renderer/src/app.js';\nexport const a = App;\n", 'common/x.ts')).toEqual([expect.stringMatching(/neither electron/)]);
  });

  it('lets both the engine and the renderer import common/', async () => {
    expect(await lint("import { SessionStatus } from '../../../common/control-api.js';\nexport const a = SessionStatus;\n", 'electron/engine/server/x.ts')).toEqual([]);
    expect(await lint("import { SessionStatus } from '../../common/control-api.js';\nexport const a = SessionStatus;\n", 'renderer/src/x.ts')).toEqual([]);
  });
});
