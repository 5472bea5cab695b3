// What the control API drives: the `ControlSource` interface (status snapshots, device card,
// host / join / leave / pause / approve) and `SessionControl`, its implementation over the session
// layer. It adapts a HostSession (createHost) or a MemberSession (joinSession) into the wire
// snapshots of common/control-api.ts and announces every change; at most one session at a time.
// The ring plugs its plan, assignment and timing in through `HostedSession.plan`/`watch` and
// `SessionControlOptions.memberRing` (engine/hosting/ring-control.ts) without this file knowing how it runs;
// a model given by URL is downloaded first through `SessionControlOptions.fetchModel` (hosting/model-fetch.ts).
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type {
  ControlEvent, DeviceCard, DeviceSummary, DownloadWire, FlowWire, HostRequest, JoinRequest, LinkWire, MemberStateWire, MemberWire, PlanWire, RingStateWire, SessionStatus,
} from '../../../common/control-api.js';
import type { DeviceBenchJson } from '../device/device-bench.js';
import { isKiwiError, KiwiError } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import type { HostSession } from '../session/host.js';
import { findOnLan } from '../session/lan-beacon.js';
import type { Capabilities } from '../session/membership.js';
import { generateIdentity, type MemberIdentity } from '../session/identity.js';
import { MemberSession, type JoinOptions } from '../session/member.js';
import { parseSessionCode } from '../session/session-code.js';

export interface ControlSource {
  status(): SessionStatus;
  device(): DeviceCard;
  /** Starts the device benchmark (no-op while one runs); progress arrives as events. */
  bench(refresh: boolean): void;
  /** Hosts a local file at once, or starts downloading `model_url` and hosts it once downloaded. */
  host(req: HostRequest): Promise<void>;
  /** Stops a running model download (its partial file stays for a later resume). */
  cancelDownload(): void;
  join(req: JoinRequest): Promise<void>;
  leave(): Promise<void>;
  pause(paused: boolean): Promise<void>;
  decide(memberId: string, approve: boolean): void;
  /** Every change as a full snapshot; returns the unsubscribe function. */
  subscribe(listener: (event: ControlEvent) => void): () => void;
}

type WireError = { code: string; message: string };

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

/** A member's part of the ring (engine/hosting/ring-control.ts: memberRing), run while joined. */
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

/** Downloads models given by URL into the cache (engine/hosting/model-fetch.ts). */
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
  memberRing?: (session: MemberSession, onChange: () => void) => MemberRing;
  /** Coalesces bursts of changes into one snapshot (ms). */
  coalesceMs?: number;
}

interface Joined {
  member: MemberSession | undefined;
  ring: MemberRing | undefined;
  req: JoinRequest & { rendezvous: string };
  memberId: string | undefined;
  /** Without opts.join.identity: the key made for this join, kept across pause and resume. */
  identity?: MemberIdentity;
  phase: SessionStatus['phase'];
}

const IDLE_DEVICE: DeviceCard = { state: 'idle', progress: null, fraction: null, summary: null, error: null };

export class SessionControl implements ControlSource {
  private readonly events = new EventEmitter<{ event: [ControlEvent] }>();
  private hosted: HostedSession | undefined;
  private joined: Joined | undefined;
  private lastError: WireError | null = null;
  private deviceCard: DeviceCard = IDLE_DEVICE;
  private benchResult: DeviceBenchJson | undefined;
  private benchAbort: AbortController | undefined;
  private download: DownloadWire | null = null;
  private downloadAbort: AbortController | undefined;
  private statusTimer: NodeJS.Timeout | undefined;
  private busy = false;
  private closed = false;

  constructor(private readonly opts: SessionControlOptions = {}) {}

  subscribe(listener: (event: ControlEvent) => void): () => void {
    this.events.on('event', listener);
    return () => this.events.off('event', listener);
  }

  device(): DeviceCard {
    return this.deviceCard;
  }

  bench(refresh: boolean): void {
    if (this.deviceCard.state === 'running') return;
    const run = this.opts.runBench;
    if (run === undefined) throw new KiwiError('CONTROL_BAD_REQUEST', 'This Kiwi has no device benchmark configured.');
    if (!refresh && this.deviceCard.state === 'done') return;
    const abort = new AbortController();
    this.benchAbort = abort;
    this.setDevice({ state: 'running', progress: 'starting', fraction: null, summary: this.deviceCard.summary, error: null });
    run((message) => this.setDevice({ ...this.deviceCard, progress: message, fraction: progressFraction(message) ?? this.deviceCard.fraction }), abort.signal).then(
      (result) => {
        this.benchResult = result;
        this.setDevice({ state: 'done', progress: null, fraction: 1, summary: deviceSummary(result), error: null });
      },
      (err: unknown) => {
        if (abort.signal.aborted) return;
        // A bug in the benchmark is still shown to the user rather than lost.
        const e = isKiwiError(err) ? { code: err.code, message: err.message } : { code: 'BENCH_FAILED', message: `The device benchmark failed: ${(err as Error)?.message ?? String(err)}` };
        this.setDevice({ state: 'failed', progress: null, fraction: null, summary: null, error: e });
      },
    );
  }

  status(): SessionStatus {
    const base: SessionStatus = {
      role: 'none', phase: 'idle', paused: false, code: null, rendezvous: null, self_peer: null, model: null,
      members: [], ring: [], links: [], plan: null, plan_error: null, assignment: null, ring_state: null, flow: null, download: this.download,
      serving: null, error: this.lastError,
    };
    if (this.hosted !== undefined) {
      const s = this.hosted.session.status();
      const plan = this.hosted.plan?.() ?? { plan: null, error: null };
      return {
        ...base, role: 'host', phase: 'active', code: s.code, rendezvous: s.rendezvousUrl, self_peer: 0, model: this.hosted.model,
        members: s.members.map((m): MemberWire => ({
          member_id: m.memberId, name: m.name, fingerprint: m.fingerprint, peer: m.peer, state: m.state, connected: m.connected, in_ring: s.ring.includes(m.peer), addresses: [...m.addresses],
          ...capabilityFigures(m.capabilities),
        })),
        ring: s.ring,
        links: s.links.map((l): LinkWire => ({ a: l.a, b: l.b, state: l.state, kind: l.kind ?? null, rtt_ms: l.rttMs ?? null })),
        plan: plan.plan, plan_error: plan.error, serving: this.hosted.serving,
        ring_state: this.hosted.ringState?.() ?? null, flow: this.hosted.flow?.() ?? null,
      };
    }
    if (this.joined !== undefined) {
      const j = this.joined;
      const self = j.member?.peer ?? null;
      return {
        ...base, role: 'member', phase: j.phase, paused: j.phase === 'paused', code: j.req.code, rendezvous: j.req.rendezvous === '' ? null : j.req.rendezvous, self_peer: self,
        self_fingerprint: j.member?.fingerprint ?? null,
        // The host's roster names everyone, so the member's ring shows names, not peer numbers.
        members: (j.member?.roster() ?? []).map((r) => rosterMember(r)),
        links: self === null ? [] : (j.member?.linkStatuses() ?? []).map((l): LinkWire => ({ a: self, b: l.peer, state: l.state, kind: l.kind ?? null, rtt_ms: l.rttMs ?? null })),
        assignment: j.phase === 'active' ? (this.opts.assignment?.() ?? j.ring?.assignment() ?? null) : null,
        flow: j.phase === 'active' ? (j.ring?.flow() ?? null) : null,
      };
    }
    return base;
  }

  /** Shows an already running host (`kiwi host --ui-port`) instead of starting one. */
  attachHost(hosted: HostedSession): void {
    if (this.hosted !== undefined || this.joined !== undefined) throw new KiwiError('CONTROL_BUSY', 'This Kiwi is already in a session; leave it first.');
    this.hosted = hosted;
    const s = hosted.session;
    s.on('change', () => this.changed());
    s.on('link', () => this.changed());
    // Too many wrong codes: the UI says the code stopped working and a new session is needed for newcomers.
    s.on('pake-locked', (err) => {
      if (this.hosted !== hosted) return;
      this.lastError = { code: err.code, message: err.message };
      this.changed();
    });
    hosted.watch?.(() => {
      if (this.hosted === hosted) this.changed();
    });
    s.on('closed', (reason) => {
      if (this.hosted !== hosted) return;
      this.hosted = undefined;
      this.lastError = { code: 'SESSION_ENDED', message: `The session ended: ${reason}.` };
      this.changed();
    });
    this.lastError = null;
    this.changed();
  }

  async host(req: HostRequest): Promise<void> {
    const start = this.opts.startHosting;
    if (start === undefined) throw new KiwiError('CONTROL_BAD_REQUEST', 'This Kiwi cannot host (it was started without a way to serve a model).');
    if (this.downloadAbort !== undefined) throw new KiwiError('CONTROL_BUSY', 'A model is downloading; cancel it first.');
    const { model, model_url: url, model_sha256: sha256, ...rest } = req;
    if (model === undefined && url !== undefined) {
      this.startDownload({ ...rest, model_url: url, ...(sha256 !== undefined ? { model_sha256: sha256 } : {}) }, start);
      return;
    }
    if (sha256 !== undefined) throw new KiwiError('CONTROL_BAD_REQUEST', 'model_sha256 checks the download of model_url: give it with model_url and without model.');
    const file = model ?? this.opts.defaultModel;
    if (file === undefined) throw new KiwiError('CONTROL_BAD_REQUEST', 'Give the model: a GGUF file path or a URL to download.');
    await this.exclusive(() => this.startHost(start, { ...rest, model: file, ...(url !== undefined ? { model_url: url } : {}) }));
  }

  cancelDownload(): void {
    if (this.downloadAbort === undefined) throw new KiwiError('CONTROL_NOT_FOUND', 'No model download is running.');
    this.downloadAbort.abort();
  }

  private async startHost(start: StartHosting, req: HostingRequest): Promise<void> {
    if (this.hosted !== undefined || this.joined !== undefined) throw new KiwiError('CONTROL_BUSY', 'This Kiwi is already in a session; leave it first.');
    let hosted: HostedSession;
    try {
      hosted = await start(req);
    } catch (err) {
      this.fail(err);
      throw err;
    }
    this.attachHost(hosted);
  }

  /**
   * Downloads the model into the cache (progress in status().download), then hosts it, telling
   * members its URL. Answers at once: the download runs on, and a cancel stops it.
   */
  private startDownload(req: HostRequest & { model_url: string }, start: StartHosting): void {
    const fetcher = this.opts.fetchModel;
    if (fetcher === undefined) throw new KiwiError('CONTROL_BAD_REQUEST', 'This Kiwi cannot download models; give the path of a GGUF file.');
    if (this.busy || this.hosted !== undefined || this.joined !== undefined) throw new KiwiError('CONTROL_BUSY', 'This Kiwi is already in a session; leave it first.');
    const url = req.model_url;
    const file = fetcher.fileName(url);
    const abort = new AbortController();
    this.downloadAbort = abort;
    this.lastError = null;
    this.download = { url, file, state: 'downloading', received_bytes: 0, total_bytes: null, bytes_per_s: null, resumed: false, error: null };
    this.changed();
    const current = (): boolean => this.downloadAbort === abort;
    // The fetcher reports every chunk; the UI gets a few snapshots a second (and the last one).
    const rate = new ProgressRate();
    void (async () => {
      let path: string;
      try {
        path = await fetcher.fetch(url, (p) => {
          if (!current() || this.download === null) return;
          const sample = rate.update(p.receivedBytes, p.totalBytes ?? null);
          if (sample === null) return;
          this.download = { ...this.download, received_bytes: p.receivedBytes, total_bytes: p.totalBytes ?? null, bytes_per_s: p.bytesPerSecond ?? sample.rate, resumed: p.resumed };
          this.changed();
        }, abort.signal, req.model_sha256);
      } catch (err) {
        if (!current()) return;
        this.downloadAbort = undefined;
        if (abort.signal.aborted) {
          this.download = this.download && { ...this.download, state: 'cancelled', bytes_per_s: null };
        } else {
          // Anything but a KiwiError is still shown rather than lost.
          const e = isKiwiError(err) ? { code: err.code, message: err.message } : { code: 'DOWNLOAD_FAILED', message: `The download failed: ${(err as Error)?.message ?? String(err)}` };
          this.download = this.download && { ...this.download, state: 'failed', bytes_per_s: null, error: e };
        }
        this.changed();
        return;
      }
      if (!current()) return;
      this.downloadAbort = undefined;
      this.download = null;
      // The checksum was the download's: the session hosts the checked file.
      const { model_url: _url, model: _model, model_sha256: _sha256, ...rest } = req;
      // A failure is in status() as the last error (startHost records it).
      await this.exclusive(() => this.startHost(start, { ...rest, model: path, model_url: url })).catch((err: unknown) => {
        if (!isKiwiError(err)) throw err;
      });
    })();
  }

  async join(req: JoinRequest): Promise<void> {
    await this.exclusive(async () => {
      if (this.hosted !== undefined || this.joined !== undefined) throw new KiwiError('CONTROL_BUSY', 'This Kiwi is already in a session; leave it first.');
      if (this.downloadAbort !== undefined) throw new KiwiError('CONTROL_BUSY', 'A model is downloading to host; cancel it first.');
      this.lastError = null;
      this.download = null;
      const joined: Joined = { member: undefined, ring: undefined, req: { ...req, rendezvous: req.rendezvous ?? '' }, memberId: undefined, phase: 'connecting' };
      this.joined = joined;
      this.changed();
      try {
        if (req.rendezvous === undefined) {
          // Found once, then kept: a resume after a pause goes straight to the same rendezvous.
          const found = await findOnLan(parseSessionCode(req.code).nameplate, this.opts.lan ?? {});
          joined.req = { ...req, rendezvous: found[0] as string };
        }
        await this.connectMember(joined);
      } catch (err) {
        if (this.joined === joined) this.joined = undefined;
        this.fail(err);
        throw err;
      }
    });
  }

  async leave(): Promise<void> {
    const hosted = this.hosted;
    const joined = this.joined;
    this.hosted = undefined;
    this.joined = undefined;
    this.lastError = null;
    this.downloadAbort?.abort();
    this.downloadAbort = undefined;
    this.download = null;
    if (hosted !== undefined) await hosted.close();
    // The host re-plans without this member before it goes, so no request fails on its account
    // (only a member in the ring has anything to hand back).
    if (joined?.phase === 'active') await joined.ring?.handBack();
    if (joined?.member !== undefined) await joined.member.leave();
    await joined?.ring?.close();
    this.changed();
  }

  /**
   * Pausing a member leaves the ring gracefully (the host re-plans without it) but keeps its
   * identity and code; resuming rejoins as the same member, which the host admits without asking.
   */
  async pause(paused: boolean): Promise<void> {
    await this.exclusive(async () => {
      const j = this.joined;
      if (j === undefined) {
        throw new KiwiError('CONTROL_BUSY', this.hosted !== undefined ? 'The host cannot pause: it serves the model. Use Leave to end the session.' : 'Join a session before pausing.');
      }
      if (paused === (j.phase === 'paused')) return;
      if (paused) {
        const m = j.member;
        const ring = j.ring;
        const inRing = j.phase === 'active';
        j.member = undefined;
        j.ring = undefined;
        j.phase = 'paused';
        this.changed();
        if (inRing) await ring?.handBack();
        await m?.leave();
        await ring?.close();
        this.changed();
        return;
      }
      j.phase = 'connecting';
      this.changed();
      try {
        await this.connectMember(j);
      } catch (err) {
        j.phase = 'paused';
        this.fail(err);
        throw err;
      }
    });
  }

  decide(memberId: string, approve: boolean): void {
    if (this.hosted === undefined) throw new KiwiError('CONTROL_BUSY', 'Only the host approves members, and this Kiwi is not hosting.');
    const m = this.hosted.session.status().members.find((x) => x.memberId === memberId);
    if (m === undefined) throw new KiwiError('CONTROL_NOT_FOUND', `No member ${memberId} in this session.`);
    this.hosted.session.decide(memberId, approve);
    this.changed();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.benchAbort?.abort();
    clearTimeout(this.statusTimer);
    await this.leave();
    clearTimeout(this.statusTimer);
    this.events.removeAllListeners();
  }

  private async connectMember(j: Joined): Promise<void> {
    const o = this.opts.join ?? {};
    const capabilities: Capabilities | undefined = this.benchResult !== undefined ? { ...this.benchResult } : undefined;
    const member = new MemberSession({
      code: j.req.code,
      rendezvousUrl: j.req.rendezvous,
      name: j.req.name ?? o.name ?? hostname().slice(0, 64),
      // The same key every time this join resumes: the host knows it as the member it approved.
      identity: o.identity ?? (j.identity ??= generateIdentity()),
      ...(capabilities !== undefined ? { capabilities } : {}),
      ...(o.listenHost !== undefined ? { listenHost: o.listenHost } : {}),
      ...(o.heartbeatMs !== undefined ? { heartbeatMs: o.heartbeatMs } : {}),
      ...(o.reconnectDelayMs !== undefined ? { reconnectDelayMs: o.reconnectDelayMs } : {}),
    });
    this.wireMember(j, member);
    // A RingMember listens for the host's assignment; its progress reaches the UI as snapshots.
    const ring = this.opts.memberRing?.(member, () => {
      if (this.joined === j && j.member === member) this.changed();
    });
    j.ring = ring;
    try {
      await member.connect();
    } catch (err) {
      j.ring = undefined;
      await ring?.close();
      throw err;
    }
  }

  /**
   * Shows a member that already runs (`kiwi join`: its status for `kiwi status`) instead of
   * joining from here; `ring` is its part of the ring. Call before member.connect().
   */
  attachMember(member: MemberSession, ring: MemberRing | undefined, req: JoinRequest & { rendezvous: string }): void {
    if (this.hosted !== undefined || this.joined !== undefined) throw new KiwiError('CONTROL_BUSY', 'This Kiwi is already in a session; leave it first.');
    const j: Joined = { member, ring, req, memberId: member.memberId, phase: 'connecting' };
    this.joined = j;
    this.wireMember(j, member);
    this.changed();
  }

  /** Follows the member's phase, links and roster into status(). */
  private wireMember(j: Joined, member: MemberSession): void {
    const current = (): boolean => this.joined === j && j.member === member;
    member.on('joined', (info) => {
      if (!current()) return;
      j.phase = info.state === 'active' ? 'active' : 'pending';
      this.changed();
    });
    member.on('approved', () => {
      if (!current()) return;
      j.phase = 'active';
      this.changed();
    });
    member.on('disconnected', () => {
      if (!current()) return;
      j.phase = 'reconnecting';
      this.changed();
    });
    member.on('link', () => {
      if (current()) this.changed();
    });
    member.on('roster', () => {
      if (current()) this.changed();
    });
    member.on('fatal', (err) => {
      if (!current()) return;
      j.phase = 'ended';
      this.lastError = { code: err.code, message: err.message };
      this.changed();
    });
    j.member = member;
    j.memberId = member.memberId;
  }

  /** One session action at a time: a second click while joining is refused, not queued. */
  private async exclusive(action: () => Promise<void>): Promise<void> {
    if (this.busy) throw new KiwiError('CONTROL_BUSY', 'Another session action is still running; wait for it to finish.');
    this.busy = true;
    try {
      await action();
    } finally {
      this.busy = false;
    }
  }

  private fail(err: unknown): void {
    if (isKiwiError(err)) this.lastError = { code: err.code, message: err.message };
    this.changed();
  }

  private setDevice(card: DeviceCard): void {
    this.deviceCard = card;
    if (!this.closed) this.events.emit('event', { type: 'device', device: card });
  }

  /** Coalesces bursts (a ring re-forming emits many link events) into one snapshot. */
  private changed(): void {
    if (this.closed || this.statusTimer !== undefined) return;
    this.statusTimer = setTimeout(() => {
      this.statusTimer = undefined;
      if (!this.closed) this.events.emit('event', { type: 'status', status: this.status() });
    }, this.opts.coalesceMs ?? 30);
  }
}

/** "memory bandwidth: round 3/8: ..." → 3/8 of the bandwidth part. */
export function progressFraction(message: string): number | null {
  const m = /round (\d+)\/(\d+)/.exec(message);
  if (m === null) return null;
  const total = Number(m[2]);
  return total > 0 ? Math.min(1, Number(m[1]) / total) : null;
}

export function deviceSummary(r: DeviceBenchJson): DeviceSummary {
  return {
    hostname: r.host.hostname,
    platform: `${r.host.platform} ${r.host.arch}`,
    cpu: r.cpu.model,
    cores: r.cpu.cores,
    memory_total_bytes: r.memory.total_bytes,
    memory_available_bytes: r.memory.available_bytes,
    gpus: r.gpus.map((g) => ({ name: g.name, vendor: g.vendor, vram_total_bytes: g.vram_total_bytes, vram_free_bytes: g.vram_free_bytes })),
    providers: r.execution_providers.filter((p) => p.works).map((p) => p.name),
    host_bandwidth_gbps: r.bandwidth.host_gbps,
    provider_bandwidth: r.bandwidth.providers.map((p) => ({ provider: p.provider, gbps: p.gbps })),
    measured_at: r.measured_at,
    cached: r.cached,
  };
}

const MEMBER_STATES: ReadonlySet<string> = new Set<MemberStateWire>(['pending', 'active', 'soft-evicted', 'evicted', 'left', 'rejected']);

/** A roster entry (what the host tells members about each other) as the wire's member. */
function rosterMember(r: { peer: number; name: string; state: string; inRing: boolean; connected?: boolean }): MemberWire {
  const state = MEMBER_STATES.has(r.state) ? (r.state as MemberStateWire) : 'active';
  return {
    member_id: `peer-${r.peer}`, name: r.name, peer: r.peer, state, connected: r.connected ?? state === 'active', in_ring: r.inRing,
    addresses: [], memory_bytes: null, bandwidth_gbps: null,
  };
}

/** Memory and bandwidth from a member's reported benchmark (untrusted shape: read defensively). */
function capabilityFigures(c: Capabilities | undefined): Pick<MemberWire, 'memory_bytes' | 'bandwidth_gbps'> {
  const fleet = c?.fleet_device;
  const f = typeof fleet === 'object' && fleet !== null ? (fleet as Record<string, unknown>) : {};
  const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  return { memory_bytes: num(f.memory_bytes), bandwidth_gbps: num(f.bandwidth_gbps) };
}
