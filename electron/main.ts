// Electron main process: composes the shell (tray, window, IPC). The engine itself is plain Node
// under electron/engine/ and is started from here like the CLI starts it.
import { BrowserWindow, app, ipcMain } from 'electron';
import { IPC_CHANNELS, isIpcChannel, type IpcInvokeMap } from './ipc-channels.js';
import { setupTray } from './tray.js';
import { setupWindow } from './window.js';

type Handlers = { [C in keyof IpcInvokeMap]: (...args: IpcInvokeMap[C]['args']) => Promise<IpcInvokeMap[C]['result']> };

const handlers: Handlers = {
  // The control API is served by the engine once a session starts (a later milestone).
  'control-api:address': async () => null,
  'app:version': async () => app.getVersion(),
};

function setupIpc(): void {
  for (const channel of IPC_CHANNELS) {
    ipcMain.handle(channel, async (event, ...args: unknown[]) => {
      // Only our own window may call; the channel list is closed.
      if (!isIpcChannel(channel) || BrowserWindow.fromWebContents(event.sender) === null) throw new Error('refused');
      return (handlers[channel] as (...a: unknown[]) => Promise<unknown>)(...args);
    });
  }
}

let mainWindow: BrowserWindow | null = null;

function openWindow(): void {
  if (mainWindow === null || mainWindow.isDestroyed()) mainWindow = setupWindow();
  else mainWindow.focus();
}

if (!app.requestSingleInstanceLock()) {
  app.quit();
} else {
  app.on('second-instance', openWindow);
  // Closing the window keeps Kiwi running in the tray.
  app.on('window-all-closed', () => undefined);
  void app.whenReady().then(() => {
    setupIpc();
    setupTray(openWindow);
    openWindow();
  });
}
