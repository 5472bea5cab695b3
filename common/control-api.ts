// The control API's wire format, shared by the engine (electron/engine/server/control-api.ts) and
// the renderer: zod schemas for every request body and every response, and the types inferred
// from them. Plain TypeScript + zod: this layer imports neither electron/**, renderer/** nor
// 'electron' (lint enforces it), so both sides of the loopback connection can use it.
import { z } from 'zod';

/** Where the API lives below its origin; the UI is served at `/`. */
export const CONTROL_API_PREFIX = '/api';
/** Largest request body the control API reads (all of them are tiny JSON). */
export const MAX_CONTROL_BODY_BYTES = 64 * 1024;

export const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string() }) });
export type ErrorBody = z.infer<typeof ErrorBody>;

// ---- device card ---------------------------------------------------------------------------

export const DeviceGpu = z.object({ name: z.string(), vendor: z.string(), vram_total_bytes: z.number().nullable(), vram_free_bytes: z.number().nullable() });

export const DeviceSummary = z.object({
  hostname: z.string(),
  platform: z.string(),
  cpu: z.string(),
  cores: z.number().int(),
  memory_total_bytes: z.number(),
  memory_available_bytes: z.number(),
  gpus: z.array(DeviceGpu),
  /** Execution providers that ran a test graph, best first. */
  providers: z.array(z.string()),
  host_bandwidth_gbps: z.number(),
  /** Per non-CPU provider, its device's bandwidth. */
  provider_bandwidth: z.array(z.object({ provider: z.string(), gbps: z.number() })),
  measured_at: z.string(),
  cached: z.boolean(),
});
export type DeviceSummary = z.infer<typeof DeviceSummary>;

export const DeviceCard = z.object({
  state: z.enum(['idle', 'running', 'done', 'failed']),
  /** The benchmark's latest progress line while it runs. */
  progress: z.string().nullable(),
  /** 0..1 when the benchmark can tell (bandwidth rounds), else null. */
  fraction: z.number().min(0).max(1).nullable(),
  summary: DeviceSummary.nullable(),
  error: ErrorBody.shape.error.nullable(),
});
export type DeviceCard = z.infer<typeof DeviceCard>;

// ---- session status ------------------------------------------------------------------------

export const MemberStateWire = z.enum(['pending', 'active', 'soft-evicted', 'evicted', 'left', 'rejected']);
export type MemberStateWire = z.infer<typeof MemberStateWire>;

/**
 * A member's NAT class as the host knows it: the mapping it measured against the rendezvous's STUN,
 * the filtering its punches showed (null: not known), whether its direct-link port is mapped on its
 * router (UPnP-IGD, NAT-PMP; null: not mapped) and `none`: the rendezvous saw its own address.
 */
export const MemberNatClassWire = z.object({
  mapping: z.enum(['endpoint-independent', 'address-dependent']).nullable(),
  filtering: z.enum(['lenient', 'port-dependent']).nullable(),
  port_mapping: z.enum(['upnp', 'nat-pmp']).nullable(),
  none: z.boolean().optional(),
});
export type MemberNatClassWire = z.infer<typeof MemberNatClassWire>;

export const MemberWire = z.object({
  member_id: z.string(),
  name: z.string(),
  /** `xxxx-xxxx` from the member's identity key and its connection's PAKE transcript, also on its screen: approve by it. Host only. */
  fingerprint: z.string().nullable().optional(),
  peer: z.number().int(),
  state: MemberStateWire,
  connected: z.boolean(),
  addresses: z.array(z.string()),
  /** Holds layers of the current ring (its plan's stages). */
  in_ring: z.boolean(),
  /** From the member's device benchmark, when it reported one. */
  memory_bytes: z.number().nullable(),
  bandwidth_gbps: z.number().nullable(),
  /** The member's NAT class, once it reported one (host: every member; member: itself only). */
  nat: MemberNatClassWire.nullable().optional(),
});
export type MemberWire = z.infer<typeof MemberWire>;

export const LinkWire = z.object({
  a: z.number().int(),
  b: z.number().int(),
  state: z.enum(['connecting', 'up', 'failed', 'closed']),
  kind: z.enum(['direct', 'relayed']).nullable(),
  rtt_ms: z.number().nullable(),
});
export type LinkWire = z.infer<typeof LinkWire>;

/** A stage's loading state; `opening`: its weights are in and its sessions open; `kept`: the member kept its layers through a re-plan. null: planned, not assigned yet. */
export const StageStateWire = z.enum(['assigned', 'loading', 'opening', 'ready', 'failed', 'kept']);

/** One stage of the plan: a peer holds layers [start, end) (half-open); `head` holds embedding and output. */
export const StageWire = z.object({
  peer: z.number().int(),
  name: z.string(),
  start: z.number().int(),
  end: z.number().int(),
  head: z.boolean(),
  /** Predicted or measured time of this stage per token. */
  stage_ms: z.number().nullable(),
  /** The plan's prediction for this stage (ms per token; null in the memory tier). */
  predicted_ms: z.number().nullable().optional(),
  /** Measured over recent ring steps (ms per step; null before any). */
  measured_ms: z.number().nullable().optional(),
  state: StageStateWire.nullable(),
});
export type StageWire = z.infer<typeof StageWire>;

/** What a ring link runs over: an ICE data channel (UDP), a WebSocket (TCP), or the rendezvous's relay. */
export const ReachWire = z.enum(['direct-udp', 'direct-tcp', 'relayed']);
export type ReachWire = z.infer<typeof ReachWire>;

/** One ring edge (peers a, b): what the planner predicted from the members' NATs, and what it became. */
export const EdgeWire = z.object({
  a: z.number().int(),
  b: z.number().int(),
  /** null: the plan did not cover this pair. */
  predicted: ReachWire.nullable(),
  /** null: the link is not up. */
  actual: ReachWire.nullable(),
  rtt_ms: z.number().nullable(),
  /** null until both are known. */
  matched: z.boolean().nullable(),
});
export type EdgeWire = z.infer<typeof EdgeWire>;

/** A member's NAT: the mapping it measured against the rendezvous, the filtering its punches showed (null: not known). */
export const MemberNatWire = z.object({
  peer: z.number().int(),
  mapping: z.enum(['endpoint-independent', 'address-dependent']).nullable(),
  filtering: z.enum(['lenient', 'port-dependent']).nullable(),
});
export type MemberNatWire = z.infer<typeof MemberNatWire>;

export const PlanWire = z.object({
  stages: z.array(StageWire),
  /** Host only: the ring's edges, predicted and actual kinds. */
  edges: z.array(EdgeWire).optional(),
  /** Host only: each member's NAT as measured and inferred. */
  nat: z.array(MemberNatWire).optional(),
  layers: z.number().int(),
  tokens_per_s: z.number().nullable(),
  /** true: tokens/s and stage times are measured over recent ring steps; false: the planner's prediction. */
  measured: z.boolean(),
});
export type PlanWire = z.infer<typeof PlanWire>;

/** What this machine holds as a member, once the host planned it in. */
export const AssignmentWire = z.object({
  start: z.number().int(),
  end: z.number().int(),
  head: z.boolean(),
  /** 0..1 while the layers load, 1 when ready. */
  load_fraction: z.number().min(0).max(1),
  stage_ms: z.number().nullable(),
});

/** One finished re-plan of the ring after a member dropped (or returned). */
export const RecoveryWire = z.object({
  /** The ring generation it produced. */
  epoch: z.number().int(),
  reason: z.string(),
  /** Epoch ms. */
  started_at: z.number(),
  duration_ms: z.number(),
  /** Weight bytes members had to fetch for their new layers. */
  bytes_moved: z.number(),
  /** Requests in flight that were recomputed and went on. */
  resumed_requests: z.number().int(),
});
export type RecoveryWire = z.infer<typeof RecoveryWire>;

/** The host's ring: its phase, generation, a re-plan in progress and the past ones. */
export const RingStateWire = z.object({
  phase: z.enum(['gathering', 'planning', 'loading', 'serving', 'recovering', 'waiting', 'failed', 'closed']),
  /** Ring generation: 1 for the first plan, +1 per re-plan (0 before the first). */
  epoch: z.number().int(),
  /** The re-plan in progress (phase 'recovering'). */
  recovery: z.object({ reason: z.string(), started_at: z.number() }).nullable(),
  /** Phase 'waiting': the remaining members cannot hold the model; requests wait until this time (epoch ms). */
  waiting_until: z.number().nullable(),
  /** Past re-plans, newest last (at most 16). */
  recoveries: z.array(RecoveryWire).max(16),
});
export type RingStateWire = z.infer<typeof RingStateWire>;

/** Tokens flowing around the ring, from measured steps. */
export const FlowWire = z.object({
  /** The ring (host) or this member's stage computed tokens within the last sampling interval. */
  active: z.boolean(),
  /** Measured tokens per second of one request (null: not measured yet). */
  tokens_per_s: z.number().nullable(),
});
export type FlowWire = z.infer<typeof FlowWire>;

/** A model being downloaded into the cache before hosting it. */
export const DownloadWire = z.object({
  url: z.string(),
  /** The file's name in the cache (the served model's name). */
  file: z.string(),
  state: z.enum(['downloading', 'failed', 'cancelled']),
  received_bytes: z.number(),
  /** null: the server did not say. */
  total_bytes: z.number().nullable(),
  /** Recent speed (null until measured). */
  bytes_per_s: z.number().nullable(),
  /** Went on from a partial download of an earlier attempt. */
  resumed: z.boolean(),
  error: ErrorBody.shape.error.nullable(),
});
export type DownloadWire = z.infer<typeof DownloadWire>;

export const SessionStatus = z.object({
  role: z.enum(['none', 'host', 'member']),
  /** Member only: the phase of this machine's membership. */
  phase: z.enum(['idle', 'connecting', 'pending', 'active', 'reconnecting', 'paused', 'ended']),
  paused: z.boolean(),
  code: z.string().nullable(),
  rendezvous: z.string().nullable(),
  /** This machine's peer number (host: 0). */
  self_peer: z.number().int().nullable(),
  /** Member only: this machine's fingerprint, to read to the host, who approves by it. */
  self_fingerprint: z.string().nullable().optional(),
  /**
   * Host only: the host's own NAT toward its rendezvous (`none` with its embedded one, else probed
   * against the external rendezvous's STUN service); null until measured or when it cannot be.
   */
  host_nat: MemberNatClassWire.nullable().optional(),
  model: z.string().nullable(),
  members: z.array(MemberWire),
  /** Ring order of peers, the host (0) first. */
  ring: z.array(z.number().int()),
  links: z.array(LinkWire),
  plan: PlanWire.nullable(),
  /** Why the session has no plan (for example a member short of memory). */
  plan_error: ErrorBody.shape.error.nullable(),
  assignment: AssignmentWire.nullable(),
  /** Host only: the ring's phase, generation and recoveries (null before a ring exists). */
  ring_state: RingStateWire.nullable(),
  flow: FlowWire.nullable(),
  /** A model download before hosting (kept after a failure or cancel so it can be shown and resumed). */
  download: DownloadWire.nullable(),
  /** The OpenAI-compatible API, when this machine serves one. */
  serving: z.object({ url: z.string(), model: z.string() }).nullable(),
  /** The last error that ended or refused an action. */
  error: ErrorBody.shape.error.nullable(),
});
export type SessionStatus = z.infer<typeof SessionStatus>;

// ---- requests ------------------------------------------------------------------------------

/**
 * Host a model: `model` a local GGUF path, or `model_url` (http/https) to download it into the
 * cache first (`model_sha256`: the file's expected sha256, checked before it is hosted); with
 * both, the local file is served and members fetch their tensors from the URL. With neither, the
 * Kiwi's built-in model (the embedded stories260K) where it has one, else a 400.
 */
export const HostRequest = z.strictObject({
  model: z.string().min(1).max(4096).optional(),
  model_url: z.string().max(4096).regex(/^https?:\/\/[^\s]+$/, 'must be an http:// or https:// URL').optional(),
  model_sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hex digits').optional(),
  auto_approve: z.boolean().optional(),
  /** How every stage lays out the weights (`kiwi host --weight-layout`): fast requantizes Q4_0 (faster decode, lossy); absent: exact. */
  weight_layout: z.enum(['exact', 'fast']).optional(),
  /** A small GGUF on this computer, of the model's vocabulary, that drafts for speculative decoding (`kiwi host --draft-model`); the answers stay the model's own. */
  draft_model: z.string().min(1).max(4096).optional(),
  /** Disk for the host's standby layers, in GB (`kiwi host --standby-gb`; 0 or absent: none): the layers after its own, built in the background. */
  standby_gb: z.number().min(0).max(1_000_000).optional(),
}).refine((r) => r.model_sha256 === undefined || (r.model_url !== undefined && r.model === undefined), {
  message: 'model_sha256 checks the download of model_url: give it with model_url and without model',
  path: ['model_sha256'],
});
export type HostRequest = z.infer<typeof HostRequest>;

export const JoinRequest = z.strictObject({
  code: z.string().min(1).max(200),
  /** Rendezvous URL, the one the host shows next to its code; absent: the one a host on this network announces. */
  rendezvous: z.string().min(1).max(2048).optional(),
  name: z.string().min(1).max(64).optional(),
  /** The most memory this member may use, runtime included, in MiB (`kiwi join --memory-mb`); the planner admits its layers within it. */
  memory_mb: z.number().int().min(1).max(2 ** 30).optional(),
  /** Disk for standby layers beside this member's range, in GB (`kiwi join --standby-gb`; 0 or absent: none). */
  standby_gb: z.number().min(0).max(1_000_000).optional(),
});
export type JoinRequest = z.infer<typeof JoinRequest>;

export const DecideRequest = z.strictObject({ member_id: z.string().min(1).max(128), approve: z.boolean() });
export type DecideRequest = z.infer<typeof DecideRequest>;

export const PauseRequest = z.strictObject({ paused: z.boolean() });
export type PauseRequest = z.infer<typeof PauseRequest>;

export const BenchRequest = z.strictObject({ refresh: z.boolean().optional() });

export const ChatMessage = z.strictObject({ role: z.enum(['system', 'user', 'assistant']), content: z.string().max(100_000) });
export const ChatRequest = z.strictObject({
  messages: z.array(ChatMessage).min(1).max(200),
  max_tokens: z.number().int().min(1).max(4096).optional(),
  temperature: z.number().min(0).max(2).optional(),
});
export type ChatRequest = z.infer<typeof ChatRequest>;

export const OkBody = z.object({ ok: z.literal(true) });

// ---- events (text/event-stream on GET /api/events) ------------------------------------------

/** Each SSE message is `event: <type>` with the JSON of a full snapshot as data. */
export const ControlEvent = z.discriminatedUnion('type', [
  z.object({ type: z.literal('status'), status: SessionStatus }),
  z.object({ type: z.literal('device'), device: DeviceCard }),
]);
export type ControlEvent = z.infer<typeof ControlEvent>;
