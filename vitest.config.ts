import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';

// The test models live in ../shared/models beside a checkout of this repo; KIWI_TEST_MODELS
// overrides that (see electron/engine/model/test-models.ts for the cache and download fallback).
const sharedModels = resolve(import.meta.dirname, '../shared/models');
const testModels = process.env.KIWI_TEST_MODELS ?? (existsSync(sharedModels) ? sharedModels : undefined);

// Tests sit beside the code they test (foo.ts + foo.test.ts).
export default defineConfig({
  test: {
    include: ['electron/**/*.test.ts', 'common/**/*.test.ts', 'bench/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    reporters: ['default', './vitest-summary-reporter.ts'],
    env: testModels !== undefined ? { KIWI_TEST_MODELS: testModels } : {},
  },
});
