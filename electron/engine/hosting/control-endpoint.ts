// The loopback control API of a running `kiwi host` or `kiwi join`: a SessionControl showing the
// node, served with a random token, and the 0600 file (server/control-file.ts) that tells `kiwi
// status` (and nobody else) where it is and the token.
import { startControlApi, type ControlApi } from '../server/control-api.js';
import { removeControlFile, writeControlFile } from '../server/control-file.js';
import type { SessionControl } from './session-control.js';

export interface ControlEndpoint {
  control: SessionControl;
  api: ControlApi;
  tokenFile: string;
  /** Removes the token file and stops the API (the SessionControl is its owner's to close). */
  close(): Promise<void>;
}

export async function startControlEndpoint(
  control: SessionControl,
  opts: { role: 'host' | 'member'; port?: number; staticDir?: string | null },
): Promise<ControlEndpoint> {
  const api = await startControlApi({ source: control, ...(opts.port !== undefined ? { port: opts.port } : {}), ...(opts.staticDir !== undefined ? { staticDir: opts.staticDir } : {}) });
  const tokenFile = await writeControlFile({ url: api.url, token: api.token, role: opts.role });
  return {
    control,
    api,
    tokenFile,
    async close() {
      await removeControlFile(tokenFile);
      await api.close();
    },
  };
}
