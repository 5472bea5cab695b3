// The main window: shows the UI the control API serves (same origin as the API, so no CORS), with
// a locked-down webPreferences set; the preload hands over the API token. Closing it hides it:
// Kiwi keeps running in the tray until Quit.
import { BrowserWindow, shell } from 'electron';
import { fileURLToPath } from 'node:url';

export interface WindowBounds {
  width: number;
  height: number;
  x?: number;
  y?: number;
}

export function setupWindow(uiOrigin: string, bounds: WindowBounds, onBounds: (b: WindowBounds) => void, quitting: () => boolean): BrowserWindow {
  const window = new BrowserWindow({
    ...bounds,
    minWidth: 720,
    minHeight: 520,
    show: false,
    title: 'Kiwi',
    backgroundColor: '#f5f7f2',
    webPreferences: {
      preload: fileURLToPath(new URL('../preload/preload.js', import.meta.url)),
      contextIsolation: true,
      sandbox: true,
      nodeIntegration: false,
    },
  });
  window.once('ready-to-show', () => window.show());
  // Only the UI's own origin loads in the window; links elsewhere open in the browser.
  window.webContents.setWindowOpenHandler(({ url }) => {
    if (url.startsWith('http://') || url.startsWith('https://')) void shell.openExternal(url);
    return { action: 'deny' };
  });
  window.webContents.on('will-navigate', (event, url) => {
    if (!url.startsWith(uiOrigin)) event.preventDefault();
  });
  window.on('close', (event) => {
    onBounds(window.getBounds());
    if (!quitting()) {
      event.preventDefault();
      window.hide();
    }
  });
  void window.loadURL(`${uiOrigin}/`);
  return window;
}
