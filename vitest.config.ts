import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';

// The test models live in ../shared/models beside a checkout of this repo; KIWI_TEST_MODELS
// overrides that (see electron/engine/model/test-models.ts for the cache and download fallback).
const sharedModels = resolve(import.meta.dirname, '../shared/models');
const testModels = process.env.KIWI_TEST_MODELS ?? (existsSync(sharedModels) ? sharedModels : undefined);

const include = ['electron/**/*.test.ts', 'common/**/*.test.ts', 'bench/**/*.test.ts'];
// Tests whose assertions are about measured stage times run alone, after the rest: another test
// file loading the same cores would be a real slowdown to them (the drift monitor rightly re-plans).
const alone = ['electron/engine/pipeline/ring.drift.process.test.ts'];

// Tests sit beside the code they test (foo.ts + foo.test.ts).
export default defineConfig({
  test: {
    projects: [
      { extends: true, test: { name: 'parallel', include, exclude: alone, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'alone', include: alone, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    reporters: ['default', './vitest-summary-reporter.ts'],
    env: testModels !== undefined ? { KIWI_TEST_MODELS: testModels } : {},
  },
});
