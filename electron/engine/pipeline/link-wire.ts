// How hidden states travel on one ring link: f32, f16 or int8 (tensor-frame.ts), with or without
// zstd, chosen per link from what the session knows of it. `exact` (the default) always sends f32,
// so `kiwi host` gives `kiwi generate`'s tokens; `auto` lets lossy encodings in where they pay;
// a fixed choice is taken as given.
//
// The `auto` model: a frame costs encode + decode time (per element, by encoding; zstd per byte)
// plus its bytes over the link's throughput. Latency is the same whatever the encoding, so it does
// not enter the choice. The objective is one request: a prefill frame plus `decodeSteps` decode
// frames. Without a measured throughput (transport/link-throughput.ts, measured as each ring link comes up) a conservative figure per link
// kind stands in; a relayed link (two hops through the rendezvous) is assumed slower than a direct one.
//
// Lossy or not (link-wire.fidelity.test.ts: 3 stages, greedy 32 tokens, 3 prompts, the encoding at
// every boundary vs f32): stories260K kept every token with f16 and with int8; a random-weight
// Llama (nearly tied logits) changed a token with each (f16 at token 23, int8 at token 7). So
// lossy wires can change output: `auto` is opt-in and the default stays `exact`.
import { KiwiError } from '../errors.js';
import { ACTIVATION_ENCODINGS, type ActivationEncoding, type WireOptions } from '../transport/tensor-frame.js';

/** What the session knows of one ring link (session/link-manager.ts RingLinkStatus, plus a probe). */
export interface LinkFacts {
  kind: 'direct' | 'relayed' | undefined;
  rttMs: number | undefined;
  /** Measured by transport/link-throughput.ts (MB/s, 10^6 bytes); undefined: not measured. */
  throughputMBps?: number;
}

/** The activations a link carries. */
export interface FrameShape {
  /** Hidden size (elements per token). */
  hidden: number;
  /** Rows of a typical decode step (requests batched together). */
  decodeBatch: number;
  /** Tokens of a typical prompt (one prefill frame). */
  prefillTokens: number;
  /** Decode steps per request; default 128. */
  decodeSteps?: number;
}

/** --activations: `exact` = f32 and nothing lossy, `auto` = the cost model over every encoding, else that encoding. */
export type EncodingPolicy = 'exact' | 'auto' | ActivationEncoding;
/** --zstd: `auto` = the cost model decides, `on`/`off` = always/never. */
export type ZstdPolicy = 'auto' | 'on' | 'off';

export interface WirePolicy {
  activations: EncodingPolicy;
  zstd: ZstdPolicy;
}

export const EXACT_WIRE_POLICY: WirePolicy = { activations: 'exact', zstd: 'off' };
export const AUTO_WIRE_POLICY: WirePolicy = { activations: 'auto', zstd: 'auto' };
/** The default everywhere (SessionHost, `kiwi host`, the UI): token-identical to one process. Its one owner. */
export const DEFAULT_WIRE_POLICY: WirePolicy = EXACT_WIRE_POLICY;

/**
 * Encode + decode time of one step frame per hidden-state element (ns), one thread, from
 * bench/wire-encodings.ts on this project's 2-core test machine (load average ~2.4, 2026-11-29):
 * 128 x 2048 prefill frames took f32 0.92 ms, f16 9.5 ms, int8 9.6 ms; 1 x 2048 decode frames
 * 33, 97 and 78 us. The slope between the two sizes is the per-element cost; the per-frame rest
 * (~25 us, header and copies) is the same for every encoding and left out. f32 is a copy; f16 and
 * int8 convert every element in JS.
 */
export const ENCODE_DECODE_NS_PER_ELEMENT: Readonly<Record<ActivationEncoding, number>> = { f32: 3.4, f16: 36, int8: 37 };

/** Wire bytes per element before zstd (int8 adds an f32 scale per row). */
const BYTES_PER_ELEMENT: Readonly<Record<ActivationEncoding, number>> = { f32: 4, f16: 2, int8: 1 };

/**
 * zstd (level 3, zstd-codec WebAssembly) on top of each encoding, same bench: a fixed cost per
 * frame (the codec's per-call setup: 1 x 2048 frames grew by 535, 434 and 131 us), a cost per
 * uncompressed byte (the 128 x 2048 frames: 13.5, 12.9 and 36 ns/byte) and the size it leaves
 * (3.70, 1.84 and 0.53 bytes per element: the mantissas of f32/f16 barely compress; int8 values
 * of a row scaled by its largest outlier crowd near zero and do).
 */
export const ZSTD_COSTS: Readonly<Record<ActivationEncoding, { fixedUs: number; nsPerByte: number; ratio: number }>> = {
  f32: { fixedUs: 420, nsPerByte: 13.5, ratio: 0.925 },
  f16: { fixedUs: 430, nsPerByte: 12.9, ratio: 0.92 },
  int8: { fixedUs: 100, nsPerByte: 36, ratio: 0.52 },
};

/**
 * Throughput assumed for a link nobody measured (MB/s): a direct link may be Wi-Fi or a 100 Mbit/s
 * LAN; a relayed one crosses the rendezvous (often on the internet) twice. Unknown kind: relayed.
 */
export const DEFAULT_THROUGHPUT_MBPS: Readonly<Record<'direct' | 'relayed', number>> = { direct: 12.5, relayed: 2.5 };

const DEFAULT_DECODE_STEPS = 128;

export interface WireCost {
  wire: WireOptions;
  /** Modelled ms for one request's frames on this link (prefill + decodeSteps decode frames). */
  ms: number;
  /** Modelled ms of one decode frame. */
  decodeFrameMs: number;
}

/** The throughput the model uses for a link (measured, else the default for its kind). */
export function linkThroughputMBps(link: LinkFacts): number {
  const t = link.throughputMBps;
  if (t !== undefined && Number.isFinite(t) && t > 0) return t;
  return DEFAULT_THROUGHPUT_MBPS[link.kind ?? 'relayed'];
}

function frameMs(wire: WireOptions, rows: number, hidden: number, throughputMBps: number): number {
  const elements = rows * hidden;
  const body = elements * BYTES_PER_ELEMENT[wire.encoding] + (wire.encoding === 'int8' ? 4 * rows : 0);
  let cpuNs = elements * ENCODE_DECODE_NS_PER_ELEMENT[wire.encoding];
  let bytes = body;
  if (wire.zstd) {
    const z = ZSTD_COSTS[wire.encoding];
    cpuNs += z.fixedUs * 1000 + body * z.nsPerByte;
    bytes = body * z.ratio;
  }
  // MB/s = 1000 bytes per ms.
  return cpuNs / 1e6 + bytes / (throughputMBps * 1000);
}

function checkFrame(frame: FrameShape): void {
  const ok = (n: number, min: number): boolean => Number.isSafeInteger(n) && n >= min;
  if (!ok(frame.hidden, 1) || !ok(frame.decodeBatch, 1) || !ok(frame.prefillTokens, 0) || (frame.decodeSteps !== undefined && !ok(frame.decodeSteps, 0))) {
    throw new KiwiError('USAGE', `A frame shape needs whole numbers (hidden >= 1, decodeBatch >= 1, prefillTokens >= 0), got ${JSON.stringify(frame)}.`);
  }
}

/** The modelled cost of every wire the policy allows on this link, cheapest first. */
export function wireCosts(link: LinkFacts, frame: FrameShape, policy: WirePolicy = AUTO_WIRE_POLICY): WireCost[] {
  checkFrame(frame);
  const p = normalizePolicy(policy);
  const encodings: readonly ActivationEncoding[] = p.activations === 'auto' ? ACTIVATION_ENCODINGS : [p.activations === 'exact' ? 'f32' : p.activations];
  const zstds = p.zstd === 'auto' ? [false, true] : [p.zstd === 'on'];
  const throughput = linkThroughputMBps(link);
  const steps = frame.decodeSteps ?? DEFAULT_DECODE_STEPS;
  const costs: WireCost[] = [];
  for (const encoding of encodings) {
    for (const zstd of zstds) {
      const wire = { encoding, zstd };
      const decodeFrameMs = frameMs(wire, frame.decodeBatch, frame.hidden, throughput);
      const prefillMs = frame.prefillTokens > 0 ? frameMs(wire, frame.prefillTokens, frame.hidden, throughput) : 0;
      costs.push({ wire, ms: prefillMs + steps * decodeFrameMs, decodeFrameMs });
    }
  }
  // Stable: on a tie the earlier (less lossy, uncompressed) wire stays first.
  return costs.sort((a, b) => a.ms - b.ms);
}

/**
 * The wire for one ring link. `policy`: a WirePolicy, or the shorthands 'exact' (f32, no zstd),
 * 'auto' (everything modelled) and a fixed WireOptions.
 */
export function chooseLinkWire(link: LinkFacts, frame: FrameShape, policy: WirePolicy | 'exact' | 'auto' | WireOptions): WireOptions {
  const p = normalizePolicy(policy);
  if (p.activations !== 'auto' && p.zstd !== 'auto') return { encoding: p.activations === 'exact' ? 'f32' : p.activations, zstd: p.zstd === 'on' };
  return wireCosts(link, frame, p)[0]!.wire;
}

function normalizePolicy(policy: WirePolicy | 'exact' | 'auto' | WireOptions): WirePolicy {
  if (policy === 'exact') return EXACT_WIRE_POLICY;
  if (policy === 'auto') return AUTO_WIRE_POLICY;
  if ('encoding' in policy) return { activations: policy.encoding, zstd: policy.zstd ? 'on' : 'off' };
  return policy;
}

const ENCODING_POLICIES: readonly string[] = ['auto', 'exact', ...ACTIVATION_ENCODINGS];
const ZSTD_POLICIES: readonly string[] = ['auto', 'on', 'off'];

/**
 * `kiwi host --activations A --zstd Z`. Defaults: exact activations; zstd follows --activations
 * (auto with auto, else off: on a fast link zstd only costs time).
 */
export function parseWirePolicy(activations: string | undefined, zstd: string | undefined): WirePolicy {
  const a = activations ?? DEFAULT_WIRE_POLICY.activations;
  if (!ENCODING_POLICIES.includes(a)) throw new KiwiError('USAGE', `--activations must be one of ${ENCODING_POLICIES.join(', ')}, got '${a}'`);
  const z = zstd ?? (a === 'auto' ? 'auto' : 'off');
  if (!ZSTD_POLICIES.includes(z)) throw new KiwiError('USAGE', `--zstd must be one of ${ZSTD_POLICIES.join(', ')}, got '${z}'`);
  return { activations: a as EncodingPolicy, zstd: z as ZstdPolicy };
}

/** Whether every wire the policy may pick keeps the hidden states bit for bit (f32, with or without zstd). */
export function isLossless(policy: WirePolicy): boolean {
  return policy.activations === 'exact' || policy.activations === 'f32';
}
