// What the control API (control-api.ts) drives: status snapshots, the device card, and the session
// actions (host / join / leave / pause / approve). The HTTP adapter knows only this interface; its
// implementation, SessionControl, composes the session layer and lives in engine/hosting/.
import type { ControlEvent, DeviceCard, HostRequest, JoinRequest, SessionStatus } from '../../../common/control-api.js';

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
