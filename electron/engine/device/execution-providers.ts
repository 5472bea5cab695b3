// Which onnxruntime execution providers actually work on this machine: each backend this build
// of onnxruntime-node lists is asked to create and run a one-node session. A provider that is
// listed but whose driver or library is missing fails here, with its reason kept for the report.
// selectProvider() resolves `--provider auto|cuda|dml|cpu` on join and host with the same probe.
// onnxruntime itself is reached through ort/providers.ts (which loads it lazily).
import { KiwiError } from '../errors.js';
import { encodeModel, GraphBuilder } from '../ort/onnx-graph.js';
import { listedBackends, openProbeSession, providerBundled, providerLibraryFile, providerLibraryInstalled } from '../ort/providers.js';
import type { ExecutionProvider } from '../ort/session.js';

export interface ProviderProbe {
  name: string;
  /** Shipped inside the onnxruntime-node package (false: needs a separately installed library). */
  bundled: boolean;
  works: boolean;
  /** Why it does not work (null when it does). */
  error: string | null;
}

/** A model computing y = a + b on float[2]: small enough that every provider can run it. */
export function tinyAddModel(): Uint8Array {
  const g = new GraphBuilder('probe');
  const a = g.input('a', 'float32', [2]);
  const b = g.input('b', 'float32', [2]);
  g.op('Add', [a, b], { output: 'y', hint: 'add' });
  g.output('y', 'float32', [2]);
  return encodeModel(g).model;
}

/** Probes every backend onnxruntime-node lists; the CPU provider is always among them. */
export async function probeExecutionProviders(): Promise<ProviderProbe[]> {
  const out: ProviderProbe[] = [];
  for (const backend of await listedBackends()) out.push(await probeProvider(backend.name, backend.bundled));
  return out;
}

/** Creates and runs the probe graph on one provider; a missing library is reported without asking onnxruntime. */
export async function probeProvider(name: string, bundled = providerBundled(name)): Promise<ProviderProbe> {
  if (!providerLibraryInstalled(name)) {
    return { name, bundled, works: false, error: `the ${name} provider library is not installed (onnxruntime-node's install skipped it)` };
  }
  let session: Awaited<ReturnType<typeof openProbeSession>> | null = null;
  try {
    session = await openProbeSession(tinyAddModel(), {
      provider: name,
      feeds: { a: { data: Float32Array.from([1, 2]), dims: [2] }, b: { data: Float32Array.from([3, 4]), dims: [2] } },
      logSeverityLevel: 4,
    });
    const { y: data } = await session.run();
    if (data?.[0] !== 4 || data[1] !== 6) throw new Error(`wrong result ${String(data)}`);
    return { name, bundled, works: true, error: null };
  } catch (err) {
    // A provider that cannot start is an answer of this probe, not a failure of it.
    return { name, bundled, works: false, error: firstLine((err as Error).message) };
  } finally {
    await session?.release();
  }
}

/** The execution providers a stage can run on. */
export type StageProvider = ExecutionProvider;
/** What `--provider` accepts: a provider, or auto (the GPU one that runs the probe graph, else the CPU). */
export type ProviderChoice = StageProvider | 'auto';
export const PROVIDER_CHOICES: readonly ProviderChoice[] = ['auto', 'cuda', 'dml', 'cpu'];

export interface ProviderSelection {
  provider: StageProvider;
  /** Why each GPU provider auto tried was passed over, e.g. "cuda: provider library not installed (…); using cpu". */
  fallbacks: string[];
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
