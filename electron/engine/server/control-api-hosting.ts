// How a machine hosts for the control API until the ring serves (issue 6): a session from
// createHost plus the whole model served on this machine by the local backend behind the
// OpenAI-compatible API. The pipeline replaces the serving half; the session half stays.
import { stat } from 'node:fs/promises';
import type { HostRequest } from '../../../common/control-api.js';
import { KiwiError } from '../errors.js';
import { createHost, type HostOptions } from '../session/host.js';
import type { HostedSession, StartHosting } from './control-api-source.js';
import { startOpenAiServer } from './http-server.js';
import { LocalBackend, type LocalBackendOptions } from './local-backend.js';

export interface LocalHostingOptions {
  session?: HostOptions;
  /** Where /v1 listens: default 127.0.0.1:8080. */
  api?: { host?: string; port?: number };
  backend?: LocalBackendOptions;
}

export function localHosting(opts: LocalHostingOptions = {}): StartHosting {
  return async (req: HostRequest): Promise<HostedSession> => {
    // Checked first so that a typo fails before a code is shown to friends.
    const isFile = await stat(req.model).then((st) => st.isFile(), () => false);
    if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${req.model} does not exist. Pick the path of a GGUF file.`);
    const backend = new LocalBackend(req.model, opts.backend);
    const server = await startOpenAiServer(backend, { host: opts.api?.host ?? '127.0.0.1', port: opts.api?.port ?? 8080 });
    let session;
    try {
      await backend.load();
      session = await createHost({ ...opts.session, ...(req.auto_approve !== undefined ? { autoApprove: req.auto_approve } : {}) });
    } catch (err) {
      await server.close();
      await backend.close();
      throw err;
    }
    return {
      session,
      model: req.model,
      serving: { url: server.url, model: backend.modelId },
      async close() {
        await session.close();
        await server.close();
        await backend.close();
      },
    };
  };
}
