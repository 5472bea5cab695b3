import { describe, expect, it } from 'vitest';
import { commands } from './commands/index.js';
import { runKiwi as run } from './commands/test-support/run-kiwi.js';

describe('kiwi CLI', () => {
  it('lists every command in --help', async () => {
    const { code, stdout } = await run(['--help']);
    expect(code).toBe(0);
    for (const command of commands) expect(stdout).toContain(`  ${command.name} `);
  });

  it.each(commands.map((c) => [c.name, c] as const))('describes every option of `kiwi %s --help`', async (name, command) => {
    const { code, stdout } = await run([name, '--help']);
    expect(code).toBe(0);
    expect(stdout).toContain(`Usage: kiwi ${name}`);
    for (const [option, spec] of Object.entries(command.options)) {
      expect(spec.description.length).toBeGreaterThan(0);
      expect(stdout).toContain(`--${option}`);
    }
  });

  it('refuses an unknown command with exit code 2', async () => {
    const { code, stderr } = await run(['frobnicate']);
    expect(code).toBe(2);
    expect(stderr).toMatch(/unknown command 'frobnicate'/);
  });

  it('prints the version', async () => {
    const { code, stdout } = await run(['--version']);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^\d+\.\d+\.\d+\n$/);
  });
});
