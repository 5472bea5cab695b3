// Preload bridge: the renderer's only door to the main process. Exposes a small typed API on
// `window.kiwi`; no Node or Electron objects leak into the page (contextIsolation on).
// Compiled to CommonJS (tsconfig.preload.json) because sandboxed preloads cannot be ES modules.
import { contextBridge, ipcRenderer } from 'electron';
import type { IpcInvokeMap } from './ipc-channels.js';

function invoke<C extends keyof IpcInvokeMap>(channel: C, ...args: IpcInvokeMap[C]['args']): Promise<IpcInvokeMap[C]['result']> {
  return ipcRenderer.invoke(channel, ...args) as Promise<IpcInvokeMap[C]['result']>;
}

const api = {
  controlApiAddress: () => invoke('control-api:address'),
  appVersion: () => invoke('app:version'),
};

export type KiwiBridge = typeof api;

contextBridge.exposeInMainWorld('kiwi', api);
