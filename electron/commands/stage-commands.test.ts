import { describe, expect, it } from 'vitest';
import { commands } from './index.js';
import { opensStages, STAGE_COMMANDS } from './stage-commands.js';

describe('the commands that restart with huge pages', () => {
  it('are kiwi commands, and the ones that only read files or talk to a session are not among them', () => {
    const names = commands.map((c) => c.name);
    for (const name of STAGE_COMMANDS) expect(names).toContain(name);
    expect(['inspect', 'tokenize', 'plan', 'synth', 'rendezvous', 'status'].filter(opensStages)).toEqual([]);
    expect(opensStages(undefined)).toBe(false);
  });
});
