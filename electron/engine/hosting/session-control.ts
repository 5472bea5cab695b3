// SessionControl: the control API's ControlSource over the session layer. It adapts a HostSession
// (a HostedSession from host-node.ts, or one `kiwi host` attaches) or a MemberSession (joined from
// here, or one `kiwi join` attaches) into the wire snapshots of common/control-api.ts and announces
// every change; at most one session at a time. The ring plugs its plan, assignment and timing in
// through `HostedSession.plan`/`watch` and `SessionControlOptions.memberRing` (ring-control.ts,
// member-node.ts) without this file knowing how it runs; a model given by URL is downloaded first
// through `SessionControlOptions.fetchModel` (model-fetch.ts).
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { ControlEvent, DeviceCard, DownloadWire, HostRequest, JoinRequest, SessionStatus } from '../../../common/control-api.js';
import type { DeviceBenchJson } from '../device/device-bench.js';
import { withMemoryBudget } from '../device/flow-capabilities.js';
import { isKiwiError, KiwiError } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import type { ControlSource } from '../server/control-source.js';
import { memoryBudgetBytes } from '../planner/model-sizes.js';
import { findOnLan } from '../session/lan-beacon.js';
import type { Capabilities } from '../session/membership.js';
import { generateIdentity } from '../session/identity.js';
import { MemberSession } from '../session/member.js';
import { parseSessionCode } from '../session/session-code.js';
import type { HostedSession, HostingRequest, MemberRing, SessionControlOptions, StartHosting, WireError } from './control-hooks.js';
import { deviceSummary, IDLE_DEVICE, progressFraction, sessionStatus, type Joined } from './control-status.js';
import { standbyBudgetBytes } from '../pipeline/standby.js';

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
    return sessionStatus({ hosted: this.hosted, joined: this.joined, download: this.download, error: this.lastError, assignment: this.opts.assignment });
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
      if (req.memory_mb !== undefined) memoryBudgetBytes(req.memory_mb, 'a memory budget of'); // refused before anyone is contacted
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
    const measured: Capabilities | undefined = this.benchResult !== undefined ? { ...this.benchResult } : undefined;
    const capabilities = j.req.memory_mb !== undefined ? withMemoryBudget(measured, memoryBudgetBytes(j.req.memory_mb, 'a memory budget of')) : measured; // the planner admits this member's layers within it
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
    const standbyBytes = standbyBudgetBytes(j.req.standby_gb, 'a standby disk budget');
    const ring = this.opts.memberRing?.(member, () => {
      if (this.joined === j && j.member === member) this.changed();
    }, { ...(standbyBytes !== undefined ? { standbyBytes } : {}), memoryBudget: j.req.memory_mb !== undefined });
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

export type { HostedSession, HostingRequest, MemberRing, ModelFetcher, ModelFetchProgress, RunBench, SessionControlOptions, StartHosting } from './control-hooks.js';
