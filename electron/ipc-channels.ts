// Every IPC channel between the preload bridge and the main process, in one typed map
// (GitHub Desktop's ipc-shared pattern). The renderer reaches the engine itself over the
// control API; IPC only hands it the address and token of that API and shell actions.

export interface ControlApiAddress {
  /** e.g. http://127.0.0.1:49152/api */
  url: string;
  /** Bearer token the control API requires. */
  token: string;
}

export interface IpcInvokeMap {
  'control-api:address': { args: []; result: ControlApiAddress | null };
  'app:version': { args: []; result: string };
}

export type IpcChannel = keyof IpcInvokeMap;

export const IPC_CHANNELS: readonly IpcChannel[] = ['control-api:address', 'app:version'];

export function isIpcChannel(value: unknown): value is IpcChannel {
  return typeof value === 'string' && (IPC_CHANNELS as readonly string[]).includes(value);
}
