// The main window: loads the built renderer with a locked-down webPreferences set.
import { BrowserWindow } from 'electron';
import { fileURLToPath } from 'node:url';

export function setupWindow(): BrowserWindow {
  const window = new BrowserWindow({
    width: 1100,
    height: 760,
    show: false,
    title: 'Kiwi',
    webPreferences: {
      preload: fileURLToPath(new URL('../preload/preload.js', import.meta.url)),
      contextIsolation: true,
      sandbox: true,
      nodeIntegration: false,
    },
  });
  window.once('ready-to-show', () => window.show());
  void window.loadFile(fileURLToPath(new URL('../../renderer/dist/index.html', import.meta.url)));
  return window;
}
