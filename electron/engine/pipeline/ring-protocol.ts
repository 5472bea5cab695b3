// What travels for the ring pipeline, validated where it enters.
// Control (inside the session's encrypted control link, as `{type:'pipeline', body}`):
//   host → member: assign (ring epoch, layer range, ring neighbours, activation wire options, model
//                  identity), weights-plan, released (a member that asked to leave is out of the ring),
//                  budget-too-small (its --memory-mb cannot hold one layer: the figure it needs),
//                  standby-plan (layers to keep on disk beside its range, standby.ts);
//                  and binary: weights chunks (bytes of the member's tensors when it has no copy of
//                  the model): u8 kind = 1 | f64 LE offset in the host's GGUF | the bytes
//   member → host: assigned, weights-request, weights-progress, opening (its weights are in, its
//                  stage opens: steps sent now wait for it), ready, failed, leaving, memory,
//                  standby-request, holds (the layers it holds on disk)
// Every re-plan starts a new ring epoch: steps and events of an older epoch are dropped on arrival.
// Ring data (inside ring links, neighbour to neighbour), one message each:
//   kind u8 = 1 STEP  | step frame (tensor-frame.ts): metadata {step, rows}, ids or hidden states
//   kind u8 = 2 EVENT | UTF-8 JSON RingEvent: free a request's caches, or a step that failed
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import { parseJson, validated, type JsonErrors } from '../parse-json.js';
import { ACTIVATION_ENCODINGS } from '../transport/tensor-frame.js';
import { MAX_SEGMENTS } from '../runtime/stage-segments.js';
import { WEIGHT_LAYOUTS } from '../runtime/weights/convert.js';

const peer = z.number().int().min(0).max(0xffff);
const layer = z.number().int().min(0).max(4096);
const hex64 = z.string().regex(/^[0-9a-f]{64}$/);
const requestId = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
const epoch = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);

export const Assign = z.strictObject({
  kind: z.literal('assign'),
  /** The ring's generation: 1 for the first plan, one more for every re-plan. */
  epoch,
  start: layer,
  end: layer,
  /** Peer whose stage feeds this one, and the peer this stage sends to (0: the host). */
  prev: peer,
  next: peer,
  encoding: z.enum(ACTIVATION_ENCODINGS as ['f32', 'f16', 'int8']),
  zstd: z.boolean(),
  /** What the link from `prev` carries (token ids into a stage that embeds): anything else is refused. */
  receive: z.strictObject({ tensor: z.enum(['ids', ...ACTIVATION_ENCODINGS] as ['ids', 'f32', 'f16', 'int8']), zstd: z.boolean() }),
  /** The model: modelFingerprint() of the host's GGUF, its name and size, and where the host got it (members fetch ranges from there). */
  model: z.strictObject({
    fingerprint: hex64, name: z.string().max(200), fileBytes: z.number().int().nonnegative(),
    url: z.string().max(2048).regex(/^https?:\/\//).optional(),
  }),
  maxPositions: z.number().int().min(1).max(16_777_216),
  /** How the stage lays out its weights (`kiwi host --weight-layout`, runtime/weights/convert.ts); absent: exact. Every stage of a ring uses the host's. */
  layout: z.enum(WEIGHT_LAYOUTS as ['exact', 'fast']).optional(),
  /**
   * The boundaries between the sessions the stage runs in (planner/moves.ts stageCuts): the member
   * reshapes its running stage where that gives these segments, else opens the range split here
   * (runtime/stage-segments.ts stageChange). Ascending, inside the range.
   */
  cuts: z.array(layer).max(MAX_SEGMENTS - 1).optional(),
}).refine((a) => (a.cuts ?? []).every((c, i, all) => c > (i === 0 ? a.start : all[i - 1]!) && c < a.end), 'cuts must ascend strictly inside the range');
export type Assign = z.infer<typeof Assign>;

const WEIGHTS_CHUNK = 1;
const CHUNK_HEADER_BYTES = 9;
/** The largest weights chunk accepted. */
export const MAX_WEIGHTS_CHUNK_BYTES = 1024 * 1024;

/** One piece of the member's file: bytes [offset, offset + data) of the host's GGUF, as a binary control message. */
export function encodeWeightsChunk(offset: number, data: Uint8Array): Uint8Array {
  const chunk = weightsChunkOf(offset, data.length);
  chunk.data.set(data);
  return chunk.message;
}

/** A weights chunk of `bytes` at `offset` with its header written: the caller reads the file straight into `data` (no copy). */
export function weightsChunkOf(offset: number, bytes: number): { message: Uint8Array; data: Uint8Array } {
  const message = new Uint8Array(CHUNK_HEADER_BYTES + bytes);
  message[0] = WEIGHTS_CHUNK;
  new DataView(message.buffer).setFloat64(1, offset, true);
  return { message, data: message.subarray(CHUNK_HEADER_BYTES) };
}

export function decodeWeightsChunk(bytes: Uint8Array): { offset: number; data: Uint8Array } {
  if (bytes.length < CHUNK_HEADER_BYTES || bytes[0] !== WEIGHTS_CHUNK) throw new KiwiError('RING_PROTOCOL', 'A binary pipeline message is not a weights chunk.');
  if (bytes.length - CHUNK_HEADER_BYTES > MAX_WEIGHTS_CHUNK_BYTES) throw new KiwiError('RING_PROTOCOL', `A weights chunk of ${bytes.length - CHUNK_HEADER_BYTES} bytes exceeds ${MAX_WEIGHTS_CHUNK_BYTES}.`);
  const offset = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getFloat64(1, true);
  if (!Number.isSafeInteger(offset) || offset < 0) throw new KiwiError('RING_PROTOCOL', 'A weights chunk has no valid offset.');
  return { offset, data: bytes.subarray(CHUNK_HEADER_BYTES) };
}

/** The host's answer to a weights request: the spans to expect and their sha256, then chunks. */
export const WeightsPlan = z.strictObject({
  kind: z.literal('weights-plan'),
  /** The assignment (by epoch) these spans belong to. */
  epoch,
  spans: z.array(z.strictObject({ offset: z.number().int().nonnegative(), bytes: z.number().int().nonnegative(), sha256: hex64 })).max(8192),
  /** The host's own HTTP range server (weights-http.ts): addresses to try in order and this member's own bearer token (it reads only this plan's spans); absent with --weights-http off or relay only. */
  http: z.strictObject({ urls: z.array(z.string().max(2048).regex(/^http:\/\//)).min(1).max(8), token: z.string().min(16).max(200) }).optional(),
});
export type WeightsPlan = z.infer<typeof WeightsPlan>;

/** The answer to `leaving`: the ring runs without this member now; it may go. */
export const Released = z.strictObject({ kind: z.literal('released') });

const mib = z.number().int().min(0).max(2 ** 30);
/**
 * The member's whole-process budget (--memory-mb) cannot hold the runtime, one layer and its KV
 * cache at the session's context: the host does not plan it. Figures in MiB; neededMib is their sum.
 */
export const BudgetTooSmall = z.strictObject({
  kind: z.literal('budget-too-small'), budgetMib: mib, neededMib: mib, runtimeMib: mib, layerMib: mib, kvMib: mib, context: z.number().int().min(1).max(16_777_216),
}).refine((b) => b.neededMib === b.runtimeMib + b.layerMib + b.kvMib && b.budgetMib < b.neededMib, 'neededMib must be the sum of its parts and above the budget');
export type BudgetTooSmall = z.infer<typeof BudgetTooSmall>;

const hashedSpan = z.strictObject({ offset: z.number().int().nonnegative(), bytes: z.number().int().nonnegative(), sha256: hex64 });

/**
 * Standby layers (standby.ts): the layers beside the member's range of assignment `epoch` it may
 * keep on disk, in the order to fetch them, each with its spans' sha256 (the token of the member's
 * weights plan now also reads them on the host's range server).
 */
export const StandbyPlan = z.strictObject({
  kind: z.literal('standby-plan'),
  epoch,
  layers: z.array(z.strictObject({ layer, spans: z.array(hashedSpan).max(64) })).max(4096),
});
export type StandbyPlan = z.infer<typeof StandbyPlan>;

export const HostToMemberBody = z.discriminatedUnion('kind', [Assign, WeightsPlan, Released, BudgetTooSmall, StandbyPlan]);
export type HostToMemberBody = z.infer<typeof HostToMemberBody>;

const span = z.strictObject({ offset: z.number().int().nonnegative(), bytes: z.number().int().nonnegative() });

/** Where a member's weights came from: its own file, earlier transfers (cache), the model's URL, the host's HTTP range server, the host's encrypted stream, or its running stage (same range as before). */
const weightsSource = z.enum(['local', 'cache', 'url', 'host-http', 'host', 'kept']);

export const MemberToHostBody = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('assigned'), epoch, start: layer, end: layer }),
  /** Byte spans of the host's GGUF the member still needs (the header first, then its tensors). */
  z.strictObject({ kind: z.literal('weights-request'), spans: z.array(span).max(8192) }),
  z.strictObject({ kind: z.literal('weights-progress'), receivedBytes: z.number().int().nonnegative(), totalBytes: z.number().int().nonnegative() }),
  /** Its weights are all on disk and its stage opens: steps of this epoch sent from now on wait for it (a re-plan adopts the ring now). */
  z.strictObject({ kind: z.literal('opening'), epoch, source: weightsSource, transferredBytes: z.number().int().nonnegative() }),
  z.strictObject({ kind: z.literal('ready'), epoch, source: weightsSource, transferredBytes: z.number().int().nonnegative(), loadMs: z.number().nonnegative() }),
  z.strictObject({ kind: z.literal('failed'), epoch: epoch.optional(), code: z.string().max(64), message: z.string().max(1000) }),
  /** The member wants to stop contributing (pause, quit): the host re-plans without it, then answers `released`. */
  z.strictObject({ kind: z.literal('leaving') }),
  /** Free memory fell below what the member keeps for other programs: plan it with at most this much (null: its full capacity again). */
  z.strictObject({ kind: z.literal('memory'), memoryBytes: z.number().int().nonnegative().nullable() }),
  /**
   * A ring neighbour sent something wrong. malformed: bytes no honest Kiwi sends (the member closed
   * that link; the host plans without the peer); numeric: NaN or infinite activations of the right
   * shape (an fp16 stage that overflowed is honest: a precision problem to report, not evict).
   */
  z.strictObject({ kind: z.literal('peer-fault'), epoch, peer, fault: z.enum(['malformed', 'numeric']), code: z.string().max(64), message: z.string().max(1000) }),
  /** The member keeps standby layers within this much disk (--standby-gb), beside its range of `epoch`: the host answers with a standby-plan. */
  z.strictObject({ kind: z.literal('standby-request'), epoch, budgetBytes: z.number().int().min(0).max(2 ** 50) }),
  /** The layers the member holds on disk now (its stage and its standby layers): the host plans with them as held. */
  z.strictObject({ kind: z.literal('holds'), ranges: z.array(z.strictObject({ start: layer, end: layer })).max(4096) }),
]);
export type MemberToHostBody = z.infer<typeof MemberToHostBody>;

const PIPELINE_MESSAGE_ERRORS: Pick<JsonErrors, 'code' | 'invalid'> = { code: 'RING_PROTOCOL', invalid: ([first]) => `A pipeline message is malformed: ${first}.` };

export function parsePipelineBody<T>(schema: z.ZodType<T>, body: unknown): T {
  return validated(schema, body, PIPELINE_MESSAGE_ERRORS);
}

// ---- ring data ----

export const RingKind = { STEP: 1, EVENT: 2 } as const;

/**
 * A row of a step: which request, how many positions its caches hold before it, their capacity;
 * `from`: its first step, whose caches start as a copy of that prompt-cache entry's first `pos` positions.
 * `replay`: the row's tokens were generated before a re-plan; each stage computes them as decode
 * steps, bit for bit (runtime/replay.ts), in one pass where that is exact.
 * `keep`: the row rebuilds a request after a re-plan; its first `keep` positions survived on every
 * stage that kept its caches, which skips the layers it still holds them for (runtime/stage-keep.ts).
 */
export const StepRow = z.strictObject({
  id: requestId,
  pos: z.number().int().nonnegative(),
  cap: z.number().int().min(1).max(16_777_216),
  from: requestId.optional(),
  replay: z.literal(true).optional(),
  keep: z.number().int().min(1).max(16_777_216).optional(),
});
export type StepRow = z.infer<typeof StepRow>;
/** Built once: a zod schema costs far more to build than to run, and this one runs on every hop of every step. */
const StepRows = z.array(StepRow).max(4096);

export const RingEvent = z.discriminatedUnion('type', [
  /**
   * Requests that ended: every stage drops their caches, then passes this on until it reaches the
   * host. Prompt cache (runtime/prefix-cache.ts): first each stage keeps the first `length`
   * positions of request `id`'s caches as entry `entry` (keep), and drops entries (drop).
   */
  z.strictObject({
    type: z.literal('free'), ids: z.array(requestId).max(4096),
    keep: z.array(z.strictObject({ id: requestId, entry: requestId, length: z.number().int().min(1).max(16_777_216) })).max(64).optional(),
    drop: z.array(requestId).max(4096).optional(),
  }),
  /** A stage could not run a step: passed on to the host, which fails the step's requests. */
  z.strictObject({ type: z.literal('step-failed'), epoch, step: z.number().int().nonnegative(), code: z.string().max(64), message: z.string().max(1000) }),
]);
export type RingEvent = z.infer<typeof RingEvent>;

export function encodeRingEvent(e: RingEvent): Uint8Array {
  const json = Buffer.from(JSON.stringify(e), 'utf8');
  const out = new Uint8Array(1 + json.length);
  out[0] = RingKind.EVENT;
  out.set(json, 1);
  return out;
}

export function encodeRingStep(frame: Uint8Array): Uint8Array {
  const out = new Uint8Array(1 + frame.length);
  out[0] = RingKind.STEP;
  out.set(frame, 1);
  return out;
}

const MAX_EVENT_BYTES = 64 * 1024;

export function decodeRingEvent(bytes: Uint8Array): RingEvent {
  if (bytes.length > MAX_EVENT_BYTES) throw new KiwiError('RING_PROTOCOL', `A ring event of ${bytes.length} bytes exceeds ${MAX_EVENT_BYTES}.`);
  return parseJson(RingEvent, Buffer.from(bytes).toString('utf8'), { ...PIPELINE_MESSAGE_ERRORS, notJson: () => 'A ring event is not JSON.' });
}

/** The ring epoch, step id and rows of a step frame's metadata. */
export function parseStepMetadata(metadata: Record<string, string>, batch: number): { epoch: number; step: number; rows: StepRow[] } {
  const step = Number(metadata.step);
  if (!Number.isSafeInteger(step) || step < 0) throw new KiwiError('RING_PROTOCOL', 'A step frame has no valid step id.');
  const epoch = Number(metadata.epoch);
  if (!Number.isSafeInteger(epoch) || epoch < 1) throw new KiwiError('RING_PROTOCOL', 'A step frame has no valid ring epoch.');
  let rows: unknown;
  try {
    rows = JSON.parse(metadata.rows ?? '');
  } catch {
    throw new KiwiError('RING_PROTOCOL', 'A step frame has no valid rows.');
  }
  const parsed = parsePipelineBody(StepRows, rows);
  if (parsed.length !== batch) throw new KiwiError('RING_PROTOCOL', `A step frame names ${parsed.length} requests for a batch of ${batch}.`);
  return { epoch, step, rows: parsed };
}

export function stepMetadata(epoch: number, step: number, rows: readonly StepRow[]): Record<string, string> {
  return { epoch: String(epoch), step: String(step), rows: JSON.stringify(rows) };
}
