// The desktop app starts: Electron opens its window on the UI served by its own engine, the
// preload hands the renderer the control API's token, and the renderer reaches the engine. Runs
// where the Electron binary is installed (node_modules/electron/path.txt names it); elsewhere
// (ELECTRON_SKIP_BINARY_DOWNLOAD) it is skipped, saying why in its name.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { _electron } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../electron/engine/test-support/processes.js';
import { shot } from './support/browser.js';

/** The Electron binary, without `require('electron')` (which would try to download one). */
function electronBinary(): string | null {
  const dir = join(repoRoot, 'node_modules/electron');
  const pathFile = join(dir, 'path.txt');
  if (!existsSync(pathFile)) return null;
  const binary = join(dir, 'dist', readFileSync(pathFile, 'utf8').trim());
  return existsSync(binary) ? binary : null;
}

const binary = electronBinary();
const title = binary !== null
  ? 'launches the desktop app, whose window reaches its engine through the preload\'s token'
  : 'launches the desktop app (SKIPPED: no Electron binary in node_modules/electron; it was installed with ELECTRON_SKIP_BINARY_DOWNLOAD)';

describe('Electron', () => {
  it.skipIf(binary === null)(title, async () => {
    execFileSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: 'inherit' });
    const userData = await mkdtemp(join(tmpdir(), 'kiwi-electron-'));
    // Containers have no setuid sandbox helper; a fresh profile keeps the test's settings apart.
    const app = await _electron.launch({ executablePath: binary as string, args: ['--no-sandbox', `--user-data-dir=${userData}`, repoRoot], cwd: repoRoot });
    try {
      const window = await app.firstWindow();
      expect(await window.title()).toBe('Kiwi');
      expect(await window.evaluate(() => typeof (window as unknown as { kiwi?: unknown }).kiwi)).toBe('object');
      // The headline comes from the control API, so it proves the token reached the renderer.
      await window.getByTestId('headline').filter({ hasText: 'Not in a session' }).waitFor({ timeout: 30_000 });
      expect(await window.evaluate(() => typeof (globalThis as { require?: unknown }).require)).toBe('undefined');
      await shot(window, '11-electron-window');
    } finally {
      await app.close();
      await rm(userData, { recursive: true, force: true });
    }
  });
});
