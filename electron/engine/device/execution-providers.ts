// Which onnxruntime execution providers actually work on this machine: each backend this build
// of onnxruntime-node lists is asked to create and run a one-node session. A provider that is
// listed but whose driver or library is missing fails here, with its reason kept for the report.
// (The runtime's session factory picks among the providers; this probe only reports them. It
// imports onnxruntime itself because the runtime depends on device/, not the other way round.)
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import onnxProto from 'onnx-proto';

export interface ProviderProbe {
  name: string;
  /** Shipped inside the onnxruntime-node package (false: needs a separately installed library). */
  bundled: boolean;
  works: boolean;
  /** Why it does not work (null when it does). */
  error: string | null;
}

const { onnx } = onnxProto;

/** A model computing y = a + b on float[2]: small enough that every provider can run it. */
export function tinyAddModel(): Uint8Array {
  const f32 = onnx.TensorProto.DataType.FLOAT;
  const io = (name: string) => ({ name, type: { tensorType: { elemType: f32, shape: { dim: [{ dimValue: 2 }] } } } });
  const model = onnx.ModelProto.create({
    irVersion: 10,
    producerName: 'kiwi-device-probe',
    opsetImport: [{ domain: '', version: 21 }],
    graph: {
      name: 'probe',
      node: [{ opType: 'Add', input: ['a', 'b'], output: ['y'], name: 'add' }],
      input: [io('a'), io('b')],
      output: [io('y')],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

/** Providers that ship as a separate shared library, which the npm install may have skipped. */
const SEPARATE_LIBRARY = new Set(['cuda', 'tensorrt']);

/**
 * Whether a provider's library is present beside onnxruntime-node's binary. Asking onnxruntime for
 * a provider whose library is missing prints error lines on stderr before it fails, so look first.
 */
export function providerLibraryInstalled(name: string): boolean {
  if (!SEPARATE_LIBRARY.has(name)) return true;
  const require = createRequire(import.meta.url);
  const dir = join(dirname(require.resolve('onnxruntime-node/package.json')), 'bin', 'napi-v6', process.platform, process.arch);
  return existsSync(join(dir, process.platform === 'win32' ? `onnxruntime_providers_${name}.dll` : `libonnxruntime_providers_${name}.so`));
}

/** Probes every backend onnxruntime-node lists; the CPU provider is always among them. */
export async function probeExecutionProviders(): Promise<ProviderProbe[]> {
  // Loaded lazily so that the rest of the device probe works where the native binary cannot load.
  const ort = await import('onnxruntime-node');
  const listed = typeof ort.listSupportedBackends === 'function' ? ort.listSupportedBackends() : [{ name: 'cpu', bundled: true }];
  const model = tinyAddModel();
  const out: ProviderProbe[] = [];
  for (const backend of listed) {
    if (!providerLibraryInstalled(backend.name)) {
      out.push({ name: backend.name, bundled: backend.bundled, works: false, error: `the ${backend.name} provider library is not installed (onnxruntime-node's install skipped it)` });
      continue;
    }
    let session: Awaited<ReturnType<typeof ort.InferenceSession.create>> | null = null;
    try {
      session = await ort.InferenceSession.create(model, { executionProviders: [backend.name], logSeverityLevel: 4 });
      const a = new ort.Tensor('float32', Float32Array.from([1, 2]), [2]);
      const b = new ort.Tensor('float32', Float32Array.from([3, 4]), [2]);
      const { y } = await session.run({ a, b });
      const data = y?.data as Float32Array | undefined;
      if (data?.[0] !== 4 || data[1] !== 6) throw new Error(`wrong result ${String(data)}`);
      out.push({ name: backend.name, bundled: backend.bundled, works: true, error: null });
    } catch (err) {
      // A provider that cannot start is an answer of this probe, not a failure of it.
      out.push({ name: backend.name, bundled: backend.bundled, works: false, error: firstLine((err as Error).message) });
    } finally {
      await session?.release();
    }
  }
  return out;
}

function firstLine(s: string): string {
  const line = s.split('\n')[0] ?? s;
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}
