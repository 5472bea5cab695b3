// A device's memory bandwidth as its onnxruntime execution provider sees it (a GPU's VRAM through
// CUDA or DirectML): a session whose graph reads one large initializer `reads` times with
// ReduceSum. The initializer lives on the device, so each run moves only a scalar back to the host.
// Graph optimizations are off so that constant folding or common-subexpression elimination does
// not remove the very reads being timed.
import onnxProto from 'onnx-proto';

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

const { onnx } = onnxProto;
const MIB = 1024 * 1024;
/** Refuse sizes that would take more host memory to build than a probe deserves. */
const MAX_BYTES = 2048 * MIB;

export function readProbeModel(bytes: number, reads: number): Uint8Array {
  if (!(bytes >= 4 && bytes <= MAX_BYTES) || !Number.isInteger(reads) || reads < 1 || reads > 64) {
    throw new RangeError(`probe size out of range: ${bytes} bytes × ${reads} reads`);
  }
  const n = Math.floor(bytes / 4);
  const weights = new Float32Array(n).fill(1);
  const f32 = onnx.TensorProto.DataType.FLOAT;
  const sums = Array.from({ length: reads }, (_, i) => `s${i}`);
  const model = onnx.ModelProto.create({
    irVersion: 10,
    producerName: 'kiwi-bandwidth-probe',
    opsetImport: [{ domain: '', version: 21 }],
    graph: {
      name: 'read-probe',
      initializer: [{ name: 'w', dataType: f32, dims: [n], rawData: new Uint8Array(weights.buffer) }],
      node: [
        // No axes input and noop_with_empty_axes = 0: reduce over every element to a scalar.
        ...sums.map((s, i) => ({ opType: 'ReduceSum', input: ['w'], output: [s], name: `read${i}`, attribute: [{ name: 'keepdims', type: onnx.AttributeProto.AttributeType.INT, i: 0 }] })),
        // An input-dependent tail keeps the graph from being a constant.
        { opType: 'Sum', input: [...sums, 'x'], output: ['y'], name: 'total' },
      ],
      input: [{ name: 'x', type: { tensorType: { elemType: f32, shape: { dim: [] } } } }],
      output: [{ name: 'y', type: { tensorType: { elemType: f32, shape: { dim: [] } } } }],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

export async function measureProviderBandwidth(provider: string, options: ProviderBandwidthOptions = {}): Promise<ProviderBandwidth> {
  const bytes = options.bytes ?? 256 * MIB;
  const reads = options.reads ?? 4;
  const runs = options.runs ?? 5;
  const ort = await import('onnxruntime-node');
  const session = await ort.InferenceSession.create(readProbeModel(bytes, reads), {
    executionProviders: [provider],
    graphOptimizationLevel: 'disabled',
    logSeverityLevel: 3,
  });
  try {
    const n = Math.floor(bytes / 4);
    const feeds = { x: new ort.Tensor('float32', Float32Array.from([0]), []) };
    const check = async (): Promise<void> => {
      const { y } = await session.run(feeds);
      // Every element is 1, so a run that really read everything returns reads × n (fp32 rounding aside).
      const got = (y?.data as Float32Array | undefined)?.[0] ?? NaN;
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
