// Where a host node is composed: `kiwi host`, hosting from the app (ringHosting, handed to
// SessionControl) and the tests all come here. A node is a session (createHost: the code, the
// rendezvous, admission) and, with a model, the ring over its members (SessionHost) served on the
// OpenAI-compatible API, which answers 503 until the ring serves; optionally the loopback control
// API showing it (SessionControl, with its token file for `kiwi status`). The order is fixed here:
// the code exists before the host's device is measured, and listeners are on the ring before it forms.
import { stat } from 'node:fs/promises';
import { totalmem } from 'node:os';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { FlowCapabilitiesOptions } from '../device/flow-capabilities.js';
import { flowCapabilities } from '../device/flow-capabilities.js';
import { SessionHost, type SessionHostOptions, type SessionHostStatus } from '../pipeline/session-host.js';
import { deviceFromCapabilities } from '../pipeline/session-fleet.js';
import { standbyBudgetBytes } from '../pipeline/standby.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import { openDraftModel, type DraftModelDrafter } from '../runtime/draft-model.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { startOpenAiServer, type OpenAiServer, type OpenAiServerOptions } from '../server/http-server.js';
import { createHost, type HostOptions, type HostSession } from '../session/host.js';
import { startWeightsHttp, type WeightsHttpServer } from '../pipeline/weights-http.js';
import type { HostedSession, HostingRequest, StartHosting } from './control-hooks.js';
import { startControlEndpoint, type ControlEndpoint } from './control-endpoint.js';
import { hostedRing } from './ring-control.js';
import { SessionControl } from './session-control.js';

type HostDevice = SessionHostOptions['hostDevice'];

/** Everything the ring takes besides the model file and the session (expect, settle time, wire, cache, threads...). */
export type RingOptions = Omit<SessionHostOptions, 'modelPath' | 'modelSizes' | 'modelUrl' | 'weightsHttp' | 'session' | 'hostDevice' | 'drafter'> & {
  hostDevice?: HostDevice;
  /** A draft model's GGUF (--draft-model): opened before the ring forms, so a wrong file fails the start. */
  draftModel?: string;
};

export interface HostModel {
  /** The GGUF file the ring serves. */
  path: string;
  /** Where it was published: members without a copy fetch their tensors' byte ranges from it. */
  url?: string;
  /**
   * Serve the file's byte ranges over HTTP on the direct-link interface (pipeline/weights-http.ts),
   * so members on the network load at the link's speed; default on whenever direct links are
   * (session.listenHost set); `false` keeps weights on the encrypted stream (`--weights-http off`).
   */
  weightsHttp?: boolean;
  ring?: RingOptions;
  /** The host as the planner sees it, measured once the code is shown (measureHostDevice); default `ring.hostDevice`, else its RAM. */
  hostDevice?: () => Promise<HostDevice | undefined>;
  /** A chat template replacing the model's (its text). */
  chatTemplate?: string;
  /** Where /v1 listens: default 127.0.0.1:8080. */
  api?: OpenAiServerOptions;
}

export interface HostNodeOptions {
  session?: HostOptions;
  /** Without a model the node is a session alone: members join, nothing is served. */
  model?: HostModel;
  /** Called once the session has its code, before the model's ring is composed. */
  onSession?: (session: HostSession) => void;
  /** Called with the ring and its API before the ring starts forming: attach listeners here. */
  onRing?: (ring: SessionHost, server: OpenAiServer) => void;
  /** Reports a ring that could not form (also in its status as the error). */
  onError?: (err: KiwiError) => void;
  /**
   * A loopback control API showing this node (port 0: any free one), its address in a token file.
   * Leave in its UI ends the session; whoever runs the node closes it once the session ended.
   */
  control?: { port: number };
  /** Stops the ring forming (Ctrl-C). */
  signal?: AbortSignal;
}

export interface HostNode {
  readonly session: HostSession;
  /** The model file served (null: a session alone). */
  readonly model: string | null;
  readonly ring: SessionHost | undefined;
  readonly server: OpenAiServer | undefined;
  readonly control: ControlEndpoint | undefined;
  /** The node as SessionControl shows it; `close` is what Leave in the UI does (default: close the node). */
  hosted(close?: () => Promise<void>): HostedSession;
  /** The ring's status, else the session's. */
  status(): SessionHostStatus | ReturnType<HostSession['status']>;
  close(): Promise<void>;
}

/** Throws FILE_NOT_FOUND unless `path` is a file; `hint` says what to do. */
export async function checkModelFile(path: string, hint: string): Promise<void> {
  const isFile = await stat(path).then((st) => st.isFile(), () => false);
  if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${path} does not exist. ${hint}`);
}

export async function createHostNode(opts: HostNodeOptions): Promise<HostNode> {
  // Checked first so that a typo fails before a code is shown to friends.
  if (opts.model !== undefined) await checkModelFile(opts.model.path, 'Pick the path of a GGUF file.');
  const draftModel = opts.model?.ring?.draftModel;
  if (draftModel !== undefined) await checkModelFile(draftModel, 'The draft model must be a small GGUF file of the same vocabulary as the model; pick its path, or host without one.');
  const modelFile = opts.model !== undefined ? await ringModelOptions(opts.model.path) : undefined;
  const session = await createHost(opts.session ?? {});
  opts.onSession?.(session);
  const forming = new AbortController();
  const onAbort = (): void => forming.abort(opts.signal?.reason);
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  if (opts.signal?.aborted === true) onAbort();
  let ring: SessionHost | undefined;
  let server: OpenAiServer | undefined;
  let control: ControlEndpoint | undefined;
  let weightsHttp: WeightsHttpServer | undefined;
  const node: HostNode = {
    session,
    model: opts.model?.path ?? null,
    get ring() {
      return ring;
    },
    get server() {
      return server;
    },
    get control() {
      return control;
    },
    hosted(close = () => node.close()) {
      return ring !== undefined && opts.model !== undefined
        ? hostedRing(ring, { model: opts.model.path, server: server ?? null, close })
        : { session, model: null, serving: null, close };
    },
    status: () => (ring !== undefined ? ring.status() : session.status()),
    async close() {
      opts.signal?.removeEventListener('abort', onAbort);
      if (!forming.signal.aborted) forming.abort(new KiwiError('SESSION_ENDED', 'The host left the session.'));
      if (control !== undefined) {
        await control.control.close();
        await control.close();
      }
      await server?.close();
      if (ring !== undefined) await ring.close();
      else await session.close();
      await weightsHttp?.close();
    },
  };
  try {
    const listenHost = opts.session?.listenHost;
    if (opts.model !== undefined && opts.model.weightsHttp !== false && listenHost !== undefined) weightsHttp = await startWeightsHttp(opts.model.path, { host: listenHost });
    if (opts.model !== undefined && modelFile !== undefined) ({ ring, server } = await serveRing(session, opts.model, modelFile, opts, weightsHttp));
    if (opts.control !== undefined) {
      const c = new SessionControl();
      c.attachHost(node.hosted(() => session.close('the host left from its UI')));
      control = await startControlEndpoint(c, { role: 'host', port: opts.control.port });
    }
  } catch (err) {
    await node.close();
    throw err;
  }
  if (ring !== undefined) {
    const r = ring;
    // The ring reports a failure both as an event and in status(); without a listener an 'error' event would throw.
    r.on('error', (err) => {
      if (!forming.signal.aborted) opts.onError?.(err);
    });
    r.form(forming.signal).catch((err: unknown) => {
      // form() already reported a KiwiError; stopping aborts it; anything else is a bug.
      if (!isKiwiError(err) && !forming.signal.aborted) throw err;
    });
  }
  return node;
}

/** The ring over the session's members and the API serving through it (503 until it serves); not yet forming. */
async function serveRing(session: HostSession, model: HostModel, file: Pick<SessionHostOptions, 'modelPath' | 'modelSizes'>, opts: HostNodeOptions, weightsHttp: WeightsHttpServer | undefined): Promise<{ ring: SessionHost; server: OpenAiServer }> {
  // The planner prices the host's edges by its NAT, measured meanwhile against an external rendezvous.
  const [measured] = await Promise.all([model.hostDevice?.(), session.natMeasured]);
  const { draftModel, ...ringOptions } = model.ring ?? {};
  const drafter = draftModel !== undefined ? await openHostDrafter(draftModel, file.modelPath, ringOptions) : undefined;
  const ring = new SessionHost(session, {
    hostDevice: { memoryBytes: totalmem() },
    ...ringOptions,
    ...(drafter !== undefined ? { drafter } : {}),
    ...(measured !== undefined ? { hostDevice: measured } : {}),
    ...file,
    ...(model.url !== undefined ? { modelUrl: model.url } : {}),
    ...(weightsHttp !== undefined ? { weightsHttp: { urls: weightsHttp.urls, tokens: weightsHttp } } : {}),
    session: {},
  });
  if (model.chatTemplate !== undefined) ring.backend.chatTemplateOverride = model.chatTemplate;
  let server: OpenAiServer;
  try {
    server = await startOpenAiServer(ring.backend, { host: '127.0.0.1', port: 8080, ...model.api });
  } catch (err) {
    await ring.close();
    throw err;
  }
  opts.onRing?.(ring, server);
  return { ring, server };
}

/** The draft model for the ring's head, run as the host's stages run (provider, threads, shard cache), over the ring's context. */
async function openHostDrafter(path: string, modelPath: string, ring: Omit<RingOptions, 'draftModel'>): Promise<DraftModelDrafter> {
  const file = await openGguf(modelPath);
  const { cache, provider, threads } = ring;
  const maxPositions = ring.maxPositions ?? (await modelShapeFromGguf(file)).maxPositions;
  return openDraftModel(path, createTokenizer(file.metadata), { ...(cache !== undefined ? { cache } : {}), ...(provider !== undefined ? { provider } : {}), ...(threads !== undefined ? { threads } : {}), maxPositions });
}

/** The ring's options read from the model file: its path and layer sizes. */
async function ringModelOptions(modelPath: string): Promise<Pick<SessionHostOptions, 'modelPath' | 'modelSizes'>> {
  return { modelPath, modelSizes: modelSizesFromGguf(await openGguf(modelPath)) };
}

/**
 * The host as the planner sees it: its capabilities file, else its device bench (cached per
 * hardware); undefined with neither (the ring then stands in the host's RAM, memory tier).
 */
export async function measureHostDevice(opts: FlowCapabilitiesOptions & { source?: string }): Promise<HostDevice | undefined> {
  const caps = await flowCapabilities(opts);
  if (caps === undefined) return undefined;
  const device = deviceFromCapabilities(caps);
  if (device === undefined) throw new KiwiError('USAGE', `${opts.source ?? 'the device bench'} has no device summary (fleet_device with memory_bytes); use the output of 'kiwi bench --json'.`);
  return device;
}

export interface RingHostingOptions {
  session?: HostOptions;
  /** Where /v1 listens: default 127.0.0.1:8080. */
  api?: Pick<OpenAiServerOptions, 'host' | 'port' | 'maxActive' | 'maxQueue' | 'apiKey'>;
  ring?: RingOptions;
  onError?: (err: KiwiError) => void;
}

/** The ring's options for a hosting request: the app's, with the request's weight layout, draft model and standby disk. */
export function ringOptionsFor(req: Pick<HostingRequest, 'weight_layout' | 'draft_model' | 'standby_gb'>, ring: RingOptions = {}): RingOptions {
  const standbyBytes = standbyBudgetBytes(req.standby_gb, 'a standby disk budget');
  if (req.weight_layout !== 'fast' && req.draft_model === undefined && standbyBytes === undefined) return ring;
  return {
    ...ring,
    ...(standbyBytes !== undefined ? { standbyBytes } : {}),
    ...(req.weight_layout === 'fast' ? { weightLayout: 'fast' as const } : {}),
    // A draft model drafts with k adapted to what pays, as `kiwi host --draft-model` does unless told otherwise.
    ...(req.draft_model !== undefined ? { draftModel: req.draft_model, speculative: ring.speculative !== undefined && ring.speculative.kind !== 'off' ? ring.speculative : { kind: 'auto' as const } } : {}),
  };
}

/** Hosting from the UI: a host node whose members become the ring, served on /v1 once it forms. */
export function ringHosting(opts: RingHostingOptions = {}): StartHosting {
  return async (req: HostingRequest): Promise<HostedSession> => {
    const node = await createHostNode({
      session: { ...opts.session, ...(req.auto_approve !== undefined ? { autoApprove: req.auto_approve } : {}) },
      model: { path: req.model, ...(req.model_url !== undefined ? { url: req.model_url } : {}), ring: ringOptionsFor(req, opts.ring), ...(opts.api !== undefined ? { api: opts.api } : {}) },
      ...(opts.onError !== undefined ? { onError: opts.onError } : {}),
    });
    return node.hosted();
  };
}
