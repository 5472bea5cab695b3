// Which onnxruntime execution providers actually work on this machine: each backend this build
// of onnxruntime-node lists is asked to create and run a one-node session. A provider that is
// listed but whose driver or library is missing fails here, with its reason kept for the report.
// selectProvider() resolves `--provider auto|cuda|dml|cpu` on join and host with the same probe.
// (It imports onnxruntime itself because the runtime depends on device/, not the other way round.)
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import onnxProto from 'onnx-proto';
import { KiwiError } from '../errors.js';

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
  return existsSync(join(dir, providerLibraryFile(name)));
}

/** Probes every backend onnxruntime-node lists; the CPU provider is always among them. */
export async function probeExecutionProviders(): Promise<ProviderProbe[]> {
  const out: ProviderProbe[] = [];
  for (const backend of await listedBackends()) out.push(await probeProvider(backend.name, backend.bundled));
  return out;
}

async function listedBackends(): Promise<{ name: string; bundled: boolean }[]> {
  // Loaded lazily so that the rest of the device probe works where the native binary cannot load.
  const ort = await import('onnxruntime-node');
  return typeof ort.listSupportedBackends === 'function' ? ort.listSupportedBackends() : [{ name: 'cpu', bundled: true }];
}

/** Creates and runs the probe graph on one provider; a missing library is reported without asking onnxruntime. */
export async function probeProvider(name: string, bundled = !SEPARATE_LIBRARY.has(name)): Promise<ProviderProbe> {
  if (!providerLibraryInstalled(name)) {
    return { name, bundled, works: false, error: `the ${name} provider library is not installed (onnxruntime-node's install skipped it)` };
  }
  const ort = await import('onnxruntime-node');
  let session: Awaited<ReturnType<typeof ort.InferenceSession.create>> | null = null;
  try {
    session = await ort.InferenceSession.create(tinyAddModel(), { executionProviders: [name], logSeverityLevel: 4 });
    const a = new ort.Tensor('float32', Float32Array.from([1, 2]), [2]);
    const b = new ort.Tensor('float32', Float32Array.from([3, 4]), [2]);
    const { y } = await session.run({ a, b });
    const data = y?.data as Float32Array | undefined;
    if (data?.[0] !== 4 || data[1] !== 6) throw new Error(`wrong result ${String(data)}`);
    return { name, bundled, works: true, error: null };
  } catch (err) {
    // A provider that cannot start is an answer of this probe, not a failure of it.
    return { name, bundled, works: false, error: firstLine((err as Error).message) };
  } finally {
    await session?.release();
  }
}

/** The execution providers a stage can run on (runtime/ort-session.ts's ExecutionProvider). */
export type StageProvider = 'cuda' | 'dml' | 'cpu';
/** What `--provider` accepts: a provider, or auto (the GPU one that runs the probe graph, else the CPU). */
export type ProviderChoice = StageProvider | 'auto';
export const PROVIDER_CHOICES: readonly ProviderChoice[] = ['auto', 'cuda', 'dml', 'cpu'];

export interface ProviderSelection {
  provider: StageProvider;
  /** Why each GPU provider auto tried was passed over, e.g. "cuda: provider library not installed (…); using cpu". */
  fallbacks: string[];
}

/** The file name of a provider's separate library on this platform. */
export function providerLibraryFile(name: string): string {
  return process.platform === 'win32' ? `onnxruntime_providers_${name}.dll` : `libonnxruntime_providers_${name}.so`;
}

/** How to get the CUDA provider (the README's section "The CUDA provider"). */
export const CUDA_INSTALL_HINT =
  'Install it with `ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules/onnxruntime-node/script/install.js` ' +
  '(or approve onnxruntime-node\'s install script: `npm install-scripts approve onnxruntime-node`, then `npm rebuild onnxruntime-node`); ' +
  'it needs CUDA 12 and cuDNN 9. `kiwi bench` then lists `cuda works` (README: "The CUDA provider").';

/** The GPU providers worth trying on this platform, best first. */
function gpuCandidates(): StageProvider[] {
  if (process.platform === 'linux') return ['cuda'];
  if (process.platform === 'win32') return ['dml', 'cuda'];
  return [];
}

/** Parses `--provider`; undefined means auto. */
export function parseProviderChoice(text: string | undefined): ProviderChoice {
  if (text === undefined) return 'auto';
  if (!(PROVIDER_CHOICES as readonly string[]).includes(text)) {
    throw new KiwiError('USAGE', `--provider must be one of ${PROVIDER_CHOICES.join(', ')}, got '${text}'`);
  }
  return text as ProviderChoice;
}

/**
 * Resolves `--provider`: auto takes the first GPU provider whose library is installed and that
 * runs the probe graph, else the CPU (with the reason for each passed-over provider); an explicit
 * GPU provider that cannot run fails with PROVIDER_UNAVAILABLE saying how to install it.
 */
export async function selectProvider(choice: ProviderChoice): Promise<ProviderSelection> {
  if (choice === 'cpu') return { provider: 'cpu', fallbacks: [] };
  const listed = new Set((await listedBackends()).map((b) => b.name));
  if (choice !== 'auto') {
    const why = await unavailableReason(choice, listed);
    if (why === null) return { provider: choice, fallbacks: [] };
    throw new KiwiError('PROVIDER_UNAVAILABLE', `--provider ${choice}: ${why}.${choice === 'cuda' ? ` ${CUDA_INSTALL_HINT}` : ''}`, { provider: choice });
  }
  const fallbacks: string[] = [];
  const candidates = gpuCandidates();
  for (const name of candidates) {
    const why = await unavailableReason(name, listed);
    if (why === null) return { provider: name, fallbacks };
    fallbacks.push(`${name}: ${why}; using ${candidates.indexOf(name) === candidates.length - 1 ? 'cpu' : 'the next provider'}`);
  }
  if (candidates.length === 0) fallbacks.push(`no GPU execution provider for ${process.platform} in onnxruntime-node; using cpu`);
  return { provider: 'cpu', fallbacks };
}

/** Why a GPU provider cannot run here, or null when it runs the probe graph. */
async function unavailableReason(name: StageProvider, listed: Set<string>): Promise<string | null> {
  if (name === 'dml' && process.platform !== 'win32') return 'DirectML runs on Windows only';
  if (!listed.has(name)) return `this build of onnxruntime-node for ${process.platform}-${process.arch} has no ${name} provider`;
  if (!providerLibraryInstalled(name)) return `provider library not installed (${providerLibraryFile(name)} missing)`;
  const probe = await probeProvider(name);
  return probe.works ? null : `the provider failed the probe graph (${probe.error ?? 'no reason given'})`;
}

function firstLine(s: string): string {
  const line = s.split('\n')[0] ?? s;
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}
