// The e2e project: Playwright (playwright-core) driving Debian's Chromium against live headless
// Kiwi processes, and the Electron launch test. Run: npx vitest run --config e2e/vitest.config.ts
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';

const sharedModels = resolve(import.meta.dirname, '../../shared/models');
const testModels = process.env.KIWI_TEST_MODELS ?? (existsSync(sharedModels) ? sharedModels : undefined);

export default defineConfig({
  root: resolve(import.meta.dirname, '..'),
  test: {
    include: ['e2e/**/*.e2e.ts'],
    globalSetup: ['e2e/support/build-renderer.ts'],
    // One browser flow at a time: the flows start real processes on a shared machine.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 60_000,
    pool: 'forks',
    reporters: ['default', './vitest-summary-reporter.ts'],
    env: testModels !== undefined ? { KIWI_TEST_MODELS: testModels } : {},
  },
});
