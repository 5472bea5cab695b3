// Where a member node is composed: `kiwi join` (createMemberNode) and joining from the app
// (memberRing, handed to SessionControl) come here. A node is a MemberSession (the PAKE join,
// heartbeats, reconnects, ring links) and its RingMember (the layers the host assigns, loaded from
// its own copy, earlier transfers or the host), plus for `kiwi join` the loopback control API that
// `kiwi status` reads. Nothing connects until connect(), so listeners go on first.
import { type FlowCapabilitiesOptions, flowCapabilities } from '../device/flow-capabilities.js';
import type { KiwiError } from '../errors.js';
import { RingMember, type RingMemberOptions } from '../pipeline/ring-member.js';
import { standbyOptions } from '../pipeline/standby-member.js';
import { loadOrCreateIdentity, type MemberIdentity } from '../session/identity.js';
import { findOnLan } from '../session/lan-beacon.js';
import { MemberSession, type JoinOptions } from '../session/member.js';
import { parseSessionCode } from '../session/session-code.js';
import { identityDir, shardCache, weightsDir } from './cache-layout.js';
import type { MemberRing } from './control-hooks.js';
import { startControlEndpoint, type ControlEndpoint } from './control-endpoint.js';
import { FlowMeter, ringAssignment, TIMING_REFRESH_MS } from './ring-control.js';
import { SessionControl } from './session-control.js';

export interface MemberNodeOptions {
  code: string;
  /** Default: the one a host on this network announces for the code's nameplate. */
  rendezvousUrl?: string;
  name: string;
  /** The identity key's label in the cache's identity/ folder (identity.ts), or the key itself. */
  identity: { label: string } | MemberIdentity;
  /** What the host is told of this machine (a --capabilities file, else the device bench). */
  capabilities: FlowCapabilitiesOptions;
  /** The rest of the join: heartbeats, listener, ICE, advertised addresses. */
  session?: Omit<JoinOptions, 'code' | 'rendezvousUrl' | 'name' | 'identity' | 'capabilities'>;
  /** This member's stage; weights default to the cache's weights/, stage graphs to its shard cache (`shardCache: false`: in memory). */
  ring?: Omit<RingMemberOptions, 'weightsDir'> & { weightsDir?: string; shardCache?: boolean };
  /** Serve the loopback control API for `kiwi status`. */
  control?: boolean;
  signal?: AbortSignal;
}

export interface MemberNode {
  readonly member: MemberSession;
  readonly ring: RingMember;
  readonly rendezvousUrl: string;
  readonly control: ControlEndpoint | undefined;
  /** Settles with the error that ends this member: a wrong code, or a host that will not plan it. */
  readonly fatal: Promise<KiwiError>;
  /** This member's stage, the requests whose KV caches it holds, and its links. */
  status(): ReturnType<RingMember['status']> & { links: ReturnType<MemberSession['linkStatuses']>; port_mapping: 'upnp' | 'nat-pmp' | null };
  connect(): Promise<void>;
  /** Removes the control API and its token file. */
  closeControl(): Promise<void>;
  /** Hands the layers back first, so the ring re-plans without this machine, then leaves and stops. */
  leave(): Promise<void>;
}

export async function createMemberNode(opts: MemberNodeOptions): Promise<MemberNode> {
  const rendezvousUrl = opts.rendezvousUrl ?? ((await findOnLan(parseSessionCode(opts.code).nameplate, { ...(opts.signal !== undefined ? { signal: opts.signal } : {}) }))[0] as string);
  const capabilities = await flowCapabilities({ ...opts.capabilities, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
  const identity = 'label' in opts.identity ? await loadOrCreateIdentity(identityDir(), opts.identity.label) : opts.identity;
  const member = new MemberSession({
    code: opts.code, rendezvousUrl, name: opts.name, identity,
    ...(capabilities !== undefined ? { capabilities } : {}),
    ...opts.session,
  });
  const { shardCache: useShardCache, weightsDir: weights, ...ringOpts } = opts.ring ?? {};
  const ring = new RingMember(member, {
    ...ringOpts,
    weightsDir: weights ?? weightsDir(),
    ...(useShardCache === false ? {} : { cache: ringOpts.cache ?? shardCache() }),
  });
  let control: ControlEndpoint | undefined;
  if (opts.control === true) {
    const c = new SessionControl();
    c.attachMember(member, {
      assignment: () => ringAssignment(ring.status()),
      flow: () => null,
      handBack: () => ring.handBack(),
      close: () => ring.close(),
    }, { code: opts.code, rendezvous: rendezvousUrl });
    control = await startControlEndpoint(c, { role: 'member', staticDir: null });
  }
  const fatal = new Promise<KiwiError>((resolve) => {
    member.once('fatal', resolve);
    ring.once('refused', resolve);
  });
  return {
    member, ring, rendezvousUrl, control, fatal,
    status: () => ({ ...ring.status(), links: member.linkStatuses(), port_mapping: member.portMapping?.protocol ?? null }),
    connect: () => member.connect(),
    closeControl: async () => control?.close(),
    async leave() {
      await ring.handBack();
      await member.leave();
      await ring.close();
    },
  };
}

/** Joining from the UI: each joined session's RingMember, its assignment and flow shown in status(). */
export function memberRing(opts: RingMemberOptions & { onError?: (err: KiwiError) => void }): (session: MemberSession, onChange: () => void, join?: { standbyBytes?: number; memoryBudget?: boolean }) => MemberRing {
  return (session, onChange, join) => {
    // The join form's standby setting (standby_gb), as `kiwi join --standby-gb`.
    const ring = new RingMember(session, {
      ...opts,
      ...(join?.standbyBytes !== undefined ? { standby: standbyOptions(join.standbyBytes, join.memoryBudget === true) } : {}),
      ...(join?.memoryBudget === true ? { growInPlace: false } : {}),
    });
    // Errors are reported to the host by the RingMember itself; the UI's caller may also log them.
    ring.on('error', (err) => opts.onError?.(err));
    ring.on('assigned', onChange);
    ring.on('weights-progress', onChange);
    ring.on('ready', onChange);
    // The stage's recent step times move with every step it computes: that is its tokens flowing.
    const meter = new FlowMeter();
    const sample = (now?: number): boolean => meter.sample(String(ring.status().stageMs), false, now);
    sample(-Infinity);
    const tick = setInterval(() => {
      if (sample()) onChange();
    }, TIMING_REFRESH_MS);
    tick.unref();
    return {
      assignment: () => ringAssignment(ring.status()),
      flow: () => ({ active: meter.activeAt(), tokens_per_s: null }),
      handBack: () => ring.handBack(),
      close: () => {
        clearInterval(tick);
        return ring.close();
      },
    };
  };
}
