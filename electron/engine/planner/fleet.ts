// The fleet file: what the planner is told about a model and the devices of a session. Parsed
// and validated here (zod) at the boundary; everything past parseFleetFile trusts these types.
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import { replayScratchBytes } from '../runtime/memory-model.js';
import type { NatFiltering, NatMapping } from './nat-reach.js';

/** Hard limits that keep a hostile or mistaken file from making the planner do unbounded work. */
export const FLEET_LIMITS = Object.freeze({
  maxDevices: 64,
  maxLayers: 4096,
  maxNameLength: 128,
  maxContext: 16_777_216,
  maxConcurrency: 4096,
  maxHeldRanges: 64,
});

/** Sizes of the model as the planner sees it; all byte counts are per the whole model's one copy. */
export interface ModelSizes {
  name: string;
  /** Transformer blocks (decoder layers). */
  layers: number;
  /** Weight bytes of one block: what a stage reads per token for each block it holds. */
  blockBytes: number;
  /** What the head reads per token: final norm and output projection. */
  headBytes: number;
  /** What the head keeps resident: embedding and output projection (tied weights counted once). */
  headResidentBytes: number;
  /** KV cache of one token in one block: 2 × kv_heads × head_dim × bytes per element. */
  kvBytesPerTokenPerLayer: number;
  /**
   * Memory one block's weights take once loaded (the runtime's packed form, model-sizes.ts); absent:
   * blockBytes stands in.
   */
  blockResidentBytes?: number;
  /**
   * What the head reads per token in the runtime's form (packed output projection, f32 final norm;
   * model-sizes.ts); absent: headBytes stands in. The time tiers price a block by blockResidentBytes too.
   */
  headReadBytes?: number;
  /** Memory every stage process needs besides its blocks and head (runtime baseline, scratch); absent: 0. */
  stageOverheadBytes?: number;
  /** Scratch every stage process needs per position of context on top (a prefill chunk's attention scores); absent: 0. */
  scratchBytesPerPosition?: number;
  /** The rows a stage keeps of each request per position (what it sent on, runtime/stage-keep.ts), per request; absent: 0. */
  keptRowBytesPerPosition?: number;
  /**
   * KV of cached prompt prefixes one block may hold (the host's --prompt-cache-mb bound, which every
   * stage keeps its layers' share of: pipeline/member-budget.ts promptCacheSizes); absent: 0.
   */
  promptCacheBytesPerBlock?: number;
  /** Parameters of one block; only the FLOPS tier uses it (2 FLOPs per parameter per token). */
  blockParams?: number;
}

export type NatClass = 'permissive' | 'restrictive';

/** Integer half-open block range [start, end). */
export interface LayerRange {
  start: number;
  end: number;
}

export interface DeviceSpec {
  name: string;
  /** Memory the device can give the model (VRAM of its GPU, or RAM for a CPU member). */
  memoryBytes: number;
  /**
   * memoryBytes is what the whole stage process may use, the runtime's own memory included (a
   * measured device's free memory, a --memory-mb budget): the model's stageOverheadBytes comes out
   * of it. Otherwise (a fleet file's figure) memoryBytes is for blocks, KV cache and head alone.
   */
  memoryCoversRuntime?: boolean;
  /** The device's process also serves the API (the host): with memoryCoversRuntime, HOST_API_BYTES more of it is the runtime's. */
  servesApi?: boolean;
  /** Measured memory bandwidth. */
  bandwidthGBps?: number;
  /** Measured time of one decoder block of this model on this device, per token. */
  blockMs?: number;
  /** Measured fixed part of a stage's step on this device, whatever its blocks (with blockMs; absent: 0). */
  stepMs?: number;
  /**
   * Measured time one block adds to a decode step per position its request has cached (attention
   * over the KV cache; ms per block per position; absent: unmeasured). Plans price stages at the
   * start of a request; the ring judges a step's measured time at its own position with it.
   */
  positionMs?: number;
  /** Measured time the head (final norm and output projection) adds to a step on this device (with blockMs; absent: the block time scaled by the bytes each reads). */
  headMs?: number;
  /**
   * Measured cost of one hop out of this device beyond the link's one-way time (ms per token): what a ring
   * step spends between one stage's compute and the next's besides the wire's round trip (encode,
   * framing, crypto, the receiver's event-loop hand-off). The ring measures it from its own steps
   * (pipeline/stage-drift-monitor.ts); absent: 0. Priced once per ring edge out of the device.
   */
  hopMs?: number;
  /** Arithmetic throughput, used only when neither bandwidth nor block time is known. */
  tflops?: number;
  nat?: NatClass;
  /** Measured UDP mapping of its NAT (nat-reach.ts); with it, `nat` is only a summary. */
  natMapping?: NatMapping;
  /** Its NAT's filtering as hole punching revealed it (nat-filtering.ts). */
  natFiltering?: NatFiltering;
  /** false: measured with no NAT in front (the rendezvous saw its own address), so it can be dialed; absent: judged by `nat`/`natMapping`. */
  behindNat?: boolean;
  /** false: it takes no ICE (UDP) links (`--no-ice`); absent: it does. */
  takesIce?: boolean;
  /** false: it takes no direct links at all, only the relay; absent: it does. */
  takesDirect?: boolean;
  rendezvousRttMs?: number;
  /**
   * Blocks whose weights the device holds now (its current stage, layers kept from earlier
   * assignments): a re-plan prefers divisions that fetch fewer blocks (plan.ts, MOVE_MARGIN).
   */
  holds?: LayerRange[];
  /** The range its stage runs now: among divisions that fetch as little, a re-plan prefers keeping stages as they run. */
  runs?: RunningRange;
}

/**
 * A range a device's stage runs; `grows`: the stage may be reshaped, keeping its segments inside
 * the next range and opening only the blocks added (runtime/stage-segments.ts reshape).
 */
export interface RunningRange extends LayerRange {
  grows?: boolean;
  /** The boundaries between the sessions the stage runs in now (default none: one session). */
  cuts?: readonly number[];
  /** Planning cuts (pipeline/fault-cuts.ts): as if the stage were cut at every block, so any blocks it runs could stay. */
  everyCut?: boolean;
}

export interface PairRtt {
  a: string;
  b: string;
  rttMs: number;
}

export interface Fleet {
  model: ModelSizes;
  /** Tokens of context reserved per request. */
  context: number;
  /** Requests served at once; each gets its own KV cache. */
  concurrency: number;
  /** The first device is the anchor: it holds the head unless another is clearly better. */
  devices: DeviceSpec[];
  rtts: PairRtt[];
}

/** A fleet whose model is still a GGUF path; the command layer reads its sizes. */
export interface FleetFile extends Omit<Fleet, 'model'> {
  model: ModelSizes | { gguf: string };
}

const byteCount = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const positive = z.number().finite().positive();
const name = z.string().min(1).max(FLEET_LIMITS.maxNameLength);

const sizesSchema = z.strictObject({
  name: name,
  layers: z.number().int().min(1).max(FLEET_LIMITS.maxLayers),
  block_bytes: byteCount.min(1),
  head_bytes: byteCount,
  head_resident_bytes: byteCount,
  kv_bytes_per_token_per_layer: byteCount,
  block_params: byteCount.min(1).optional(),
  block_resident_bytes: byteCount.min(1).optional(),
  head_read_bytes: byteCount.optional(),
  stage_overhead_bytes: byteCount.optional(),
  scratch_bytes_per_position: byteCount.optional(),
  kept_row_bytes_per_position: byteCount.optional(),
});

const ggufSchema = z.strictObject({ gguf: z.string().min(1).max(4096) });

const deviceSchema = z.strictObject({
  name: name,
  memory_bytes: byteCount,
  bandwidth_gbps: positive.nullable().optional(),
  block_ms: positive.nullable().optional(),
  step_ms: z.number().finite().nonnegative().nullable().optional(),
  position_ms: z.number().finite().nonnegative().nullable().optional(),
  head_ms: z.number().finite().nonnegative().nullable().optional(),
  hop_ms: z.number().finite().nonnegative().nullable().optional(),
  tflops: positive.nullable().optional(),
  nat: z.enum(['permissive', 'restrictive']).nullable().optional(),
  nat_mapping: z.enum(['endpoint-independent', 'address-dependent']).nullable().optional(),
  nat_filtering: z.enum(['lenient', 'port-dependent']).nullable().optional(),
  rendezvous_rtt_ms: z.number().finite().nonnegative().nullable().optional(),
  holds: z
    .array(z.tuple([z.number().int().min(0).max(FLEET_LIMITS.maxLayers), z.number().int().min(1).max(FLEET_LIMITS.maxLayers)]).refine(([a, b]) => a < b, 'a held range [start, end) needs start < end'))
    .max(FLEET_LIMITS.maxHeldRanges)
    .optional(),
});

const fleetSchema = z.strictObject({
  model: z.union([sizesSchema, ggufSchema]),
  context: z.number().int().min(1).max(FLEET_LIMITS.maxContext),
  concurrency: z.number().int().min(1).max(FLEET_LIMITS.maxConcurrency).default(1),
  devices: z.array(deviceSchema).min(1).max(FLEET_LIMITS.maxDevices),
  rtt_ms: z
    .array(z.tuple([name, name, z.number().finite().nonnegative()]))
    .max((FLEET_LIMITS.maxDevices * (FLEET_LIMITS.maxDevices - 1)) / 2)
    .optional(),
});

type RawSizes = z.infer<typeof sizesSchema>;

/**
 * Memory a stage process needs besides its blocks and head at `context` positions: the fixed
 * overhead, the scratch that grows with the context, the rows it keeps of `concurrency` requests
 * (runtime/stage-keep.ts) and, where the runtime's own memory is modelled (stageOverheadBytes),
 * what a re-plan's one-pass replay leaves (ring stages replay in one pass).
 */
export function stageOverheadAt(sizes: ModelSizes, context: number, concurrency = 1): number {
  const perPosition = (sizes.scratchBytesPerPosition ?? 0) * context + (sizes.keptRowBytesPerPosition ?? 0) * context * concurrency;
  if (sizes.stageOverheadBytes === undefined) return perPosition;
  return sizes.stageOverheadBytes + perPosition + replayScratchBytes(sizes.kvBytesPerTokenPerLayer, context);
}

/** Validates a parsed JSON value as a fleet file; throws FLEET_INVALID naming the bad field. */
export function parseFleetFile(value: unknown): FleetFile {
  const parsed = fleetSchema.safeParse(value);
  if (!parsed.success) {
    const problems = parsed.error.issues.slice(0, 5).map((issue) => `${formatPath(issue.path)}: ${issue.message}`);
    throw new KiwiError('FLEET_INVALID', `the fleet file is not valid: ${problems.join('; ')}. See electron/engine/planner/README.md for the format.`, {
      issues: problems,
    });
  }
  const raw = parsed.data;

  const names = new Set<string>();
  for (const d of raw.devices) {
    if (names.has(d.name)) invalid(`two devices are named '${d.name}'; device names must be unique`);
    names.add(d.name);
  }
  const pairs = new Set<string>();
  const rtts: PairRtt[] = [];
  for (const [a, b, rttMs] of raw.rtt_ms ?? []) {
    if (!names.has(a)) invalid(`rtt_ms names '${a}', which is not a device of this fleet`);
    if (!names.has(b)) invalid(`rtt_ms names '${b}', which is not a device of this fleet`);
    if (a === b) invalid(`rtt_ms pairs '${a}' with itself`);
    const key = a < b ? `${a}\u0000${b}` : `${b}\u0000${a}`;
    if (pairs.has(key)) invalid(`rtt_ms gives the pair '${a}'/'${b}' twice`);
    pairs.add(key);
    rtts.push({ a, b, rttMs });
  }

  const devices: DeviceSpec[] = raw.devices.map((d) => {
    const out: DeviceSpec = { name: d.name, memoryBytes: d.memory_bytes };
    if (d.bandwidth_gbps != null) out.bandwidthGBps = d.bandwidth_gbps;
    if (d.block_ms != null) out.blockMs = d.block_ms;
    if (d.step_ms != null) out.stepMs = d.step_ms;
    if (d.position_ms != null) out.positionMs = d.position_ms;
    if (d.head_ms != null) out.headMs = d.head_ms;
    if (d.hop_ms != null) out.hopMs = d.hop_ms;
    if (d.tflops != null) out.tflops = d.tflops;
    if (d.nat != null) out.nat = d.nat;
    if (d.nat_mapping != null) out.natMapping = d.nat_mapping;
    if (d.nat_filtering != null) out.natFiltering = d.nat_filtering;
    if (d.rendezvous_rtt_ms != null) out.rendezvousRttMs = d.rendezvous_rtt_ms;
    if (d.holds !== undefined) out.holds = d.holds.map(([start, end]) => ({ start, end }));
    return out;
  });
  const model = 'gguf' in raw.model ? { gguf: raw.model.gguf } : toSizes(raw.model);
  return { model, context: raw.context, concurrency: raw.concurrency, devices, rtts };
}

/** Validates model sizes coming from code (e.g. read from a GGUF) with the same rules as the file. */
export function checkModelSizes(sizes: ModelSizes): ModelSizes {
  const raw: Record<string, unknown> = {
    name: sizes.name,
    layers: sizes.layers,
    block_bytes: sizes.blockBytes,
    head_bytes: sizes.headBytes,
    head_resident_bytes: sizes.headResidentBytes,
    kv_bytes_per_token_per_layer: sizes.kvBytesPerTokenPerLayer,
  };
  if (sizes.blockParams !== undefined) raw.block_params = sizes.blockParams;
  if (sizes.blockResidentBytes !== undefined) raw.block_resident_bytes = sizes.blockResidentBytes;
  if (sizes.headReadBytes !== undefined) raw.head_read_bytes = sizes.headReadBytes;
  if (sizes.stageOverheadBytes !== undefined) raw.stage_overhead_bytes = sizes.stageOverheadBytes;
  if (sizes.scratchBytesPerPosition !== undefined) raw.scratch_bytes_per_position = sizes.scratchBytesPerPosition;
  if (sizes.keptRowBytesPerPosition !== undefined) raw.kept_row_bytes_per_position = sizes.keptRowBytesPerPosition;
  const parsed = sizesSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.slice(0, 5).map((issue) => `${formatPath(issue.path)}: ${issue.message}`);
    throw new KiwiError('FLEET_INVALID', `the model's sizes are not usable by the planner: ${problems.join('; ')}`);
  }
  return toSizes(parsed.data);
}

/** Replaces a `{"gguf": path}` model by the sizes read from that file. */
export function withModelSizes(file: FleetFile, sizes: ModelSizes): Fleet {
  return { ...file, model: checkModelSizes(sizes) };
}

export function isResolved(file: FleetFile): file is Fleet {
  return !('gguf' in file.model);
}

function toSizes(raw: RawSizes): ModelSizes {
  const out: ModelSizes = {
    name: raw.name,
    layers: raw.layers,
    blockBytes: raw.block_bytes,
    headBytes: raw.head_bytes,
    headResidentBytes: raw.head_resident_bytes,
    kvBytesPerTokenPerLayer: raw.kv_bytes_per_token_per_layer,
  };
  if (raw.block_params !== undefined) out.blockParams = raw.block_params;
  if (raw.block_resident_bytes !== undefined) out.blockResidentBytes = raw.block_resident_bytes;
  if (raw.head_read_bytes !== undefined) out.headReadBytes = raw.head_read_bytes;
  if (raw.stage_overhead_bytes !== undefined) out.stageOverheadBytes = raw.stage_overhead_bytes;
  if (raw.scratch_bytes_per_position !== undefined) out.scratchBytesPerPosition = raw.scratch_bytes_per_position;
  if (raw.kept_row_bytes_per_position !== undefined) out.keptRowBytesPerPosition = raw.kept_row_bytes_per_position;
  return out;
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out === '' ? '(top level)' : out;
}

function invalid(message: string): never {
  throw new KiwiError('FLEET_INVALID', `the fleet file is not valid: ${message}.`);
}
