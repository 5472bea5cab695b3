// A device's memory bandwidth as its onnxruntime execution provider sees it (a GPU's VRAM through
// CUDA or DirectML): a session whose graph reads one large initializer `reads` times with
// ReduceSum. The initializer lives on the device, so each run moves only a scalar back to the host.
// Graph optimizations are off so that constant folding or common-subexpression elimination does
// not remove the very reads being timed.
import { encodeModel, f32Bytes, GraphBuilder } from '../ort/onnx-graph.js';
import { openProbeSession } from '../ort/providers.js';

export interface ProviderBandwidthOptions {
  /** Size of the initializer; well beyond any GPU's last-level cache by default. */
  bytes?: number;
  /** ReduceSum nodes over it per run. */
  reads?: number;
  /** Timed runs (after one warm-up); the median is reported. */
  runs?: number;
}

export interface ProviderBandwidth {
  provider: string;
  gbps: number;
  bytes: number;
  reads: number;
  samplesGBps: number[];
}

const MIB = 1024 * 1024;
/** Refuse sizes that would take more host memory to build than a probe deserves. */
const MAX_BYTES = 2048 * MIB;

export function readProbeModel(bytes: number, reads: number): Uint8Array {
  if (!(bytes >= 4 && bytes <= MAX_BYTES) || !Number.isInteger(reads) || reads < 1 || reads > 64) {
    throw new RangeError(`probe size out of range: ${bytes} bytes × ${reads} reads`);
  }
  const n = Math.floor(bytes / 4);
  const g = new GraphBuilder('read-probe');
  const w = g.initializer('w', 'float32', [n], f32Bytes(new Float32Array(n).fill(1)));
  const x = g.input('x', 'float32', []);
  // No axes input and noop_with_empty_axes = 0: reduce over every element to a scalar.
  const sums = Array.from({ length: reads }, (_, i) => g.op('ReduceSum', [w], { output: `s${i}`, hint: `read${i}`, attrs: { keepdims: 0 } }));
  // An input-dependent tail keeps the graph from being a constant.
  g.op('Sum', [...sums, x], { output: 'y', hint: 'total' });
  g.output('y', 'float32', []);
  return encodeModel(g).model;
}

export async function measureProviderBandwidth(provider: string, options: ProviderBandwidthOptions = {}): Promise<ProviderBandwidth> {
  const bytes = options.bytes ?? 256 * MIB;
  const reads = options.reads ?? 4;
  const runs = options.runs ?? 5;
  const n = Math.floor(bytes / 4);
  const session = await openProbeSession(readProbeModel(bytes, reads), {
    provider,
    feeds: { x: { data: Float32Array.from([0]), dims: [] } },
    graphOptimizationLevel: 'disabled',
    logSeverityLevel: 3,
  });
  try {
    const check = async (): Promise<void> => {
      const { y } = await session.run();
      // Every element is 1, so a run that really read everything returns reads × n (fp32 rounding aside).
      const got = y?.[0] ?? NaN;
      if (!(Math.abs(got - reads * n) <= reads * n * 1e-3)) throw new Error(`bandwidth probe on ${provider} returned ${got}, expected ${reads * n}`);
    };
    await check(); // warm-up: first-run allocations and kernel selection
    const samples: number[] = [];
    for (let r = 0; r < runs; r++) {
      const t0 = performance.now();
      await check();
      const seconds = (performance.now() - t0) / 1000;
      samples.push((n * 4 * reads) / seconds / 1e9);
    }
    const sorted = [...samples].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    const gbps = sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
    return { provider, gbps, bytes: n * 4, reads, samplesGBps: samples };
  } finally {
    await session.release();
  }
}
