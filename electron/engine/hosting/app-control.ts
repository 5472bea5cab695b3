// Where the desktop app's engine is composed (electron/main.ts, and the e2e tests' headless Kiwi):
// a SessionControl that hosts through a host node (ringHosting: the ring of `kiwi host --model`,
// served on /v1 once it forms), joins through a member node's RingMember (memberRing: as `kiwi
// join`), downloads models given by URL into the one cache (model-fetch.ts), hosts the embedded
// stories260K when asked for no model, and runs the device bench; behind the loopback control API.
import { runDeviceBench } from '../device/device-bench.js';
import type { KiwiError } from '../errors.js';
import { defaultModelPath } from '../paths.js';
import type { RingMemberOptions } from '../pipeline/ring-member.js';
import { startControlApi, type ControlApi } from '../server/control-api.js';
import type { HostOptions } from '../session/host.js';
import type { RunBench, SessionControlOptions } from './control-hooks.js';
import { ringHosting, type RingHostingOptions, type RingOptions } from './host-node.js';
import { memberRing } from './member-node.js';
import { modelFetcher } from './model-fetch.js';
import { SessionControl } from './session-control.js';

export interface AppControlOptions {
  /** The hosted session: its rendezvous, listener, eviction times. */
  session?: HostOptions;
  /** Where /v1 listens while hosting (default 127.0.0.1:8080). */
  api?: RingHostingOptions['api'];
  ring?: RingOptions;
  /** A joined member's stage: where received layers go, the shard cache. */
  member: RingMemberOptions;
  /** Defaults for joining: name, listener, heartbeat, identity. */
  join?: SessionControlOptions['join'];
  /** Default: the device bench with its cache (device-bench.ts). */
  runBench?: RunBench;
  /** A ring that could not form, or a member's stage that failed. */
  onError?: (where: 'host' | 'member', err: KiwiError) => void;
}

export interface AppControl {
  control: SessionControl;
  api: ControlApi;
  /** Leaves the session (members are told, the API stops), then stops the control API. */
  close(): Promise<void>;
}

export async function createAppControl(opts: AppControlOptions): Promise<AppControl> {
  const control = new SessionControl({
    // Hosting and joining run the ring exactly as `kiwi host --model` and `kiwi join` do.
    startHosting: ringHosting({
      ...(opts.session !== undefined ? { session: opts.session } : {}),
      ...(opts.api !== undefined ? { api: opts.api } : {}),
      ...(opts.ring !== undefined ? { ring: opts.ring } : {}),
      onError: (err) => opts.onError?.('host', err),
    }),
    // A model given by URL lands in the cache first (resumable), as with `kiwi host --model-url`.
    fetchModel: modelFetcher(),
    // First run: "Host the built-in story model" hosts the stories260K bundled with the app.
    defaultModel: defaultModelPath(),
    memberRing: memberRing({ ...opts.member, onError: (err) => opts.onError?.('member', err) }),
    runBench: opts.runBench ?? ((onProgress, signal) => runDeviceBench({ onProgress, signal })),
    ...(opts.join !== undefined ? { join: opts.join } : {}),
  });
  const api = await startControlApi({ source: control });
  return {
    control,
    api,
    async close() {
      await control.close();
      await api.close();
    },
  };
}
