// e2e global setup: builds the renderer from the current sources, so the UI under test is never a
// stale renderer/dist. Built as production (vitest sets NODE_ENV=test, which would bundle React's
// development build).
import { build } from 'vite';
import { resolve } from 'node:path';

export default async function setup(): Promise<void> {
  const saved = process.env.NODE_ENV;
  process.env.NODE_ENV = 'production';
  try {
    await build({ configFile: resolve(import.meta.dirname, '../../renderer/vite.config.ts'), mode: 'production', logLevel: 'warn' });
  } finally {
    process.env.NODE_ENV = saved;
  }
}
