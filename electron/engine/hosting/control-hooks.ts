// What SessionControl (session-control.ts) is given to do its work, without knowing how it runs:
// how to host (a HostedSession from host-node.ts), a member's part of the ring (member-node.ts),
// how a model URL reaches the cache (model-fetch.ts) and the device benchmark.
import type { FlowWire, HostRequest, PlanWire, RingStateWire, SessionStatus } from '../../../common/control-api.js';
import type { DeviceBenchJson } from '../device/device-bench.js';
import type { HostSession } from '../session/host.js';
import type { JoinOptions, MemberSession } from '../session/member.js';

export type WireError = { code: string; message: string };

/** A hosted session as the control API sees it: the session, what it serves, its plan. */
export interface HostedSession {
  session: HostSession;
  /** The model file the session serves (null: a session without a model yet). */
  model: string | null;
  serving: { url: string; model: string } | null;
  /** The ring's plan, or why there is none; absent until the pipeline provides it. */
  plan?: () => { plan: PlanWire | null; error: WireError | null };
  /** The ring's phase, generation and recoveries; absent until the pipeline provides it. */
  ringState?: () => RingStateWire | null;
  /** Whether tokens flow around the ring now, and how fast. */
  flow?: () => FlowWire | null;
  /** Calls the listener whenever the plan or serving state changes (the ring forming, loading, failing). */
  watch?: (listener: () => void) => void;
  close(): Promise<void>;
}

/** A member's part of the ring (member-node.ts: memberRing), run while joined. */
export interface MemberRing {
  assignment(): SessionStatus['assignment'];
  /** Whether this member's stage computes tokens now. */
  flow(): FlowWire | null;
  /** Asks the host to re-plan without this member; resolves once released (or after a timeout). */
  handBack(): Promise<void>;
  close(): Promise<void>;
}

/** What hosting starts from: a local model file (downloaded already when it came from `model_url`). */
export type HostingRequest = Omit<HostRequest, 'model' | 'model_sha256'> & { model: string };
export type StartHosting = (req: HostingRequest) => Promise<HostedSession>;

export interface ModelFetchProgress {
  receivedBytes: number;
  totalBytes: number | undefined;
  /** Recent speed; undefined until measured. */
  bytesPerSecond: number | undefined;
  resumed: boolean;
}

/** Downloads models given by URL into the cache (model-fetch.ts). */
export interface ModelFetcher {
  /** The cached file's name for `url` (refuses a URL it cannot use). */
  fileName(url: string): string;
  /** The cached file's path, downloaded (or resumed) first unless complete already; `sha256`: the file's expected one (hex). */
  fetch(url: string, onProgress: (p: ModelFetchProgress) => void, signal: AbortSignal, sha256?: string): Promise<string>;
}
export type RunBench = (onProgress: (message: string) => void, signal: AbortSignal) => Promise<DeviceBenchJson>;

export interface SessionControlOptions {
  /** How this machine hosts (createHost + serving); without it hosting is refused. */
  startHosting?: StartHosting;
  /** How a model given by URL reaches the cache; without it only local files can be hosted. */
  fetchModel?: ModelFetcher;
  /** The model hosted when a request names none (the embedded stories260K: paths.ts defaultModelPath); without it such a request is refused. */
  defaultModel?: string | undefined;
  runBench?: RunBench;
  /** Defaults for joining: name, direct-link listener, heartbeat. */
  join?: Partial<Pick<JoinOptions, 'listenHost' | 'heartbeatMs' | 'reconnectDelayMs' | 'identity'>> & { name?: string };
  /** Where to listen for a host's LAN announcement when a join names no rendezvous. */
  lan?: { port?: number; timeoutMs?: number };
  /** This member's assignment and stage timing, once the pipeline has one (overrides `memberRing`'s). */
  assignment?: () => SessionStatus['assignment'];
  /** Runs this member's part of the ring for each joined session; its assignment shows in status(). */
  memberRing?: (session: MemberSession, onChange: () => void, join?: { standbyBytes?: number; memoryBudget?: boolean }) => MemberRing;
  /** Coalesces bursts of changes into one snapshot (ms). */
  coalesceMs?: number;
}
