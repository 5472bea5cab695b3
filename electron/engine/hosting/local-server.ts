// Where a local server is composed (`kiwi serve`): the whole model in this process (optionally as
// a chain of stages) behind the OpenAI-compatible API. The API listens first, so a port in use
// fails at once and clients get 503 (not a refused connection) while the model loads.
import { startOpenAiServer, type OpenAiServer, type OpenAiServerOptions } from '../server/http-server.js';
import { LocalBackend, type LocalBackendOptions } from '../server/local-backend.js';
import { shardCache } from './cache-layout.js';

export interface LocalServerOptions {
  modelPath: string;
  /** The runtime's options; stage graphs go to the cache's shard cache unless `shardCache: false`. */
  backend?: LocalBackendOptions & { shardCache?: boolean };
  api?: OpenAiServerOptions;
}

export interface LocalServer {
  readonly backend: LocalBackend;
  readonly server: OpenAiServer;
  /** Loads the model; the API serves once it resolves. */
  load(): Promise<void>;
  close(): Promise<void>;
}

export async function createLocalServer(opts: LocalServerOptions): Promise<LocalServer> {
  const { shardCache: useShardCache, ...backendOpts } = opts.backend ?? {};
  const backend = new LocalBackend(opts.modelPath, { ...(useShardCache === false ? {} : { cache: shardCache() }), ...backendOpts });
  const server = await startOpenAiServer(backend, opts.api);
  return {
    backend,
    server,
    load: () => backend.load(),
    async close() {
      await server.close();
      await backend.close();
    },
  };
}
