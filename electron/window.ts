// The main window: shows the UI the control API serves (same origin as the API, so no CORS), with
// a locked-down webPreferences set; the preload hands over the API token. Closing it hides it:
// Kiwi keeps running in the tray until Quit. setupWebSecurity holds for every web contents: no new
// windows, no navigation off the UI's origin, permissions denied but what the UI needs, and only
// https links opened in the user's browser (url-policy.ts decides, by parsed origins).
import { BrowserWindow, app, session, shell } from 'electron';
import { fileURLToPath } from 'node:url';
import { isExternalUrlAllowed, isPermissionAllowed, isSameOrigin } from './url-policy.js';

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

/** Call once, when the app is ready and before any window opens. `uiOrigin` is null until the control API listens. */
export function setupWebSecurity(uiOrigin: () => string | null): void {
  const onUiOrigin = (url: string): boolean => {
    const origin = uiOrigin();
    return origin !== null && isSameOrigin(url, origin);
  };
  app.on('web-contents-created', (_event, contents) => {
    // No new windows: an https link opens in the user's browser, anything else nowhere.
    contents.setWindowOpenHandler(({ url }) => {
      if (isExternalUrlAllowed(url)) void shell.openExternal(url);
      return { action: 'deny' };
    });
    const stayOnUi = (event: { preventDefault(): void }, url: string): void => {
      if (!onUiOrigin(url)) event.preventDefault();
    };
    contents.on('will-navigate', stayOnUi);
    contents.on('will-redirect', stayOnUi);
    contents.on('will-attach-webview', (event) => event.preventDefault());
  });
  session.defaultSession.setPermissionRequestHandler((_contents, permission, callback, details) => {
    const origin = uiOrigin();
    callback(origin !== null && isPermissionAllowed(permission, details.requestingUrl, origin));
  });
  session.defaultSession.setPermissionCheckHandler((_contents, permission, requestingOrigin) => {
    const origin = uiOrigin();
    return origin !== null && isPermissionAllowed(permission, requestingOrigin, origin);
  });
}
