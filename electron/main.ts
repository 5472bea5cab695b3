// Electron main process: runs the engine (engine/hosting/app-control.ts: a SessionControl behind
// the control API on loopback) and composes the shell around it: tray, window, IPC, settings.
// Single instance: a second launch focuses the first one's window. The OpenAI API and the control API stay on loopback; the ring
// listener and the embedded rendezvous listen where the settings (or --listen / --rendezvous-host,
// as for the CLI) say, on every interface by default so that members can reach them.
import { BrowserWindow, app, ipcMain } from 'electron';
import Store from 'electron-store';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { createAppControl, type AppControl } from './engine/hosting/app-control.js';
import { shardCache, weightsDir } from './engine/hosting/cache-layout.js';
import { loadOrCreateIdentity } from './engine/session/identity.js';
import { IPC_CHANNELS, isIpcChannel, type ControlApiAddress, type IpcInvokeMap } from './ipc-channels.js';
import { setupTray, type KiwiTray } from './tray.js';
import { isSameOrigin } from './url-policy.js';
import { setupWebSecurity, setupWindow, type WindowBounds } from './window.js';

interface Settings {
  /** Port of the OpenAI-compatible API while hosting. */
  apiPort: number;
  /** Name other members and the host see. */
  memberName: string;
  /** Address of the direct ring listener (the CLI's --listen). */
  listenHost: string;
  /** Address of the embedded rendezvous while hosting (the CLI's --rendezvous-host). */
  rendezvousHost: string;
  window: WindowBounds;
}

/** An IPv4/IPv6 address or a host name, as the listeners take it. */
const ADDRESS_PATTERN = '^[0-9A-Za-z.:%_-]{1,253}$';

const store = new Store<Settings>({
  name: 'settings',
  defaults: { apiPort: 8080, memberName: hostname().slice(0, 64), listenHost: '0.0.0.0', rendezvousHost: '0.0.0.0', window: { width: 1100, height: 760 } },
  schema: {
    apiPort: { type: 'integer', minimum: 1, maximum: 65535 },
    memberName: { type: 'string', minLength: 1, maxLength: 64 },
    listenHost: { type: 'string', pattern: ADDRESS_PATTERN },
    rendezvousHost: { type: 'string', pattern: ADDRESS_PATTERN },
    window: {
      type: 'object',
      properties: { width: { type: 'integer', minimum: 400 }, height: { type: 'integer', minimum: 300 }, x: { type: 'integer' }, y: { type: 'integer' } },
      required: ['width', 'height'],
    },
  },
});

let engine: AppControl | undefined;
let tray: KiwiTray | undefined;
let mainWindow: BrowserWindow | null = null;
let quitting = false;

/** A listener address: the command-line switch (as the CLI's flag) if given and valid, else the setting. */
function listenerAddress(switchName: 'listen' | 'rendezvous-host', setting: 'listenHost' | 'rendezvousHost'): string {
  const value = app.commandLine.getSwitchValue(switchName);
  if (value === '') return store.get(setting);
  if (!new RegExp(ADDRESS_PATTERN).test(value)) throw new Error(`--${switchName} must be an address, got '${value}'`);
  return value;
}

const handlers: { [C in keyof IpcInvokeMap]: (...args: IpcInvokeMap[C]['args']) => Promise<IpcInvokeMap[C]['result']> } = {
  'control-api:address': async (): Promise<ControlApiAddress | null> => (engine !== undefined ? { url: engine.api.url, token: engine.api.token } : null),
  'app:version': async () => app.getVersion(),
};

function setupIpc(): void {
  for (const channel of IPC_CHANNELS) {
    ipcMain.handle(channel, async (event, ...args: unknown[]) => {
      // Only our own window, showing our own UI, may call; the channel list is closed and takes no arguments.
      const from = BrowserWindow.fromWebContents(event.sender);
      const origin = engine !== undefined ? new URL(engine.api.url).origin : null;
      if (!isIpcChannel(channel) || from === null || origin === null || !isSameOrigin(event.senderFrame?.url ?? '', origin) || args.length > 0) throw new Error('refused');
      return (handlers[channel] as () => Promise<unknown>)();
    });
  }
}

function openWindow(): void {
  if (engine === undefined) return;
  if (mainWindow === null || mainWindow.isDestroyed()) {
    mainWindow = setupWindow(new URL(engine.api.url).origin, store.get('window'), (b) => store.set('window', b), () => quitting);
  } else {
    mainWindow.show();
    mainWindow.focus();
  }
}

async function startEngine(): Promise<void> {
  const listenHost = listenerAddress('listen', 'listenHost');
  const rendezvousHost = listenerAddress('rendezvous-host', 'rendezvousHost');
  const e = await createAppControl({
    api: { port: store.get('apiPort') },
    session: { embeddedRendezvous: { host: rendezvousHost, port: 0 }, listenHost },
    ring: { maxPositions: 4096, cache: shardCache() },
    member: { weightsDir: weightsDir(), cache: shardCache() },
    // The member's identity key lives in the app's data folder (0600): the host knows this machine by it across restarts.
    join: { name: store.get('memberName'), listenHost, identity: await loadOrCreateIdentity(join(app.getPath('userData'), 'identity'), 'app') },
    onError: (where, err) => console.error(where === 'host' ? 'kiwi: the ring failed:' : 'kiwi: this member\'s stage failed:', err.message),
  });
  engine = e;
  tray = setupTray({
    openWindow,
    setPaused: (paused) => {
      e.control.pause(paused).catch((err: unknown) => console.error('kiwi: pausing failed:', err));
    },
  });
  tray.update(e.control.status());
  e.control.subscribe((ev) => {
    if (ev.type === 'status') tray?.update(ev.status);
  });
}

if (!app.requestSingleInstanceLock()) {
  app.quit();
} else {
  app.on('second-instance', openWindow);
  // Closing the window keeps Kiwi running in the tray.
  app.on('window-all-closed', () => undefined);
  app.on('before-quit', (event) => {
    if (quitting) return;
    // Leave the session cleanly (members are told, the API stops) before the process ends.
    quitting = true;
    event.preventDefault();
    void (async () => {
      try {
        await engine?.close();
      } catch (err) {
        console.error('kiwi: shutting down the engine failed:', err);
      } finally {
        tray?.destroy();
        app.quit();
      }
    })();
  });
  void app.whenReady().then(async () => {
    // Before any window exists: every web contents gets the navigation, window and permission policy.
    setupWebSecurity(() => (engine !== undefined ? new URL(engine.api.url).origin : null));
    setupIpc();
    await startEngine();
    openWindow();
  });
}
