// `kiwi bench`: the host probe, the execution providers that work, and the measured memory
// bandwidth (host RAM with every core; each GPU through its execution provider), cached under Kiwi's cache folder by a fingerprint of the hardware so a second run
// is instant until the hardware (or the probe) changes. Live figures (available RAM, free VRAM)
// are always read fresh; only measurements come from the cache.
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { kiwiCacheDir } from '../paths.js';
import { formatEta, ProgressRate } from '../progress-rate.js';
import { probeExecutionProviders, type ProviderProbe } from './execution-providers.js';
import { probeHost, type HostInfo } from './host-probe.js';
import { measureHostBandwidth, type BandwidthOptions, type BandwidthResult } from './memory-bandwidth.js';
import { measureProviderBandwidth } from './provider-bandwidth.js';
import { loadMembwAddon } from './native-addon.js';

/** Bump when a measurement changes meaning, so old cache entries stop matching. */
export const BENCH_VERSION = 2;

/**
 * The seam for the per-block probe (issue 4, `--model`): the runtime builds one decoder block of
 * the model's shape with random weights and returns the median time of repeated runs. `key`
 * identifies the shape (and provider) so results are cached per model.
 */
export interface BlockProbe {
  key: string;
  run(signal?: AbortSignal): Promise<BlockMeasurement>;
}

export interface BlockMeasurement {
  /** What one more block adds to a decode step. */
  block_ms: number;
  /** The fixed part of a stage's decode step, whatever its blocks (session run, embedding, I/O). */
  step_ms?: number;
  /** What one block adds to a step per cached position of the request (the probe's position_ms). */
  position_ms?: number;
  /** What the head (final norm and output projection) adds to a step. */
  head_ms?: number;
  runs: number;
  provider: string;
}

export interface DeviceBenchOptions {
  /** Folder of the cache (default: <kiwi cache>/bench). */
  cacheDir?: string;
  /** Measure again even when a cached result matches. */
  refresh?: boolean;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
  bandwidth?: BandwidthOptions;
  blockProbe?: BlockProbe;
  /** Injected for tests (a changed machine); default: the real probe. */
  probeHost?: (signal?: AbortSignal) => Promise<HostInfo>;
}

const measurementsSchema = z.strictObject({
  version: z.literal(BENCH_VERSION),
  fingerprint: z.string(),
  measured_at: z.string(),
  execution_providers: z.array(z.strictObject({ name: z.string(), bundled: z.boolean(), works: z.boolean(), error: z.string().nullable() })),
  bandwidth: z.strictObject({
    host_gbps: z.number().positive(),
    method: z.enum(['native-read', 'js-copy']),
    fallback_reason: z.string().nullable(),
    threads: z.number().int().positive(),
    bytes_per_thread: z.number().int().positive(),
    rounds: z.number().int().positive(),
    samples_gbps: z.array(z.number()),
    /** Per working non-CPU execution provider: its device's bandwidth through that provider. */
    providers: z.array(z.strictObject({ provider: z.string(), gbps: z.number().positive(), bytes: z.number().int().positive(), samples_gbps: z.array(z.number()) })),
  }),
  blocks: z.record(
    z.string(),
    z.strictObject({
      block_ms: z.number().positive(),
      step_ms: z.number().nonnegative().optional(),
      position_ms: z.number().nonnegative().optional(),
      head_ms: z.number().nonnegative().optional(),
      runs: z.number().int().positive(),
      provider: z.string(),
    }),
  ),
});

export type Measurements = z.infer<typeof measurementsSchema>;

export interface DeviceBenchJson {
  version: number;
  fingerprint: string;
  cached: boolean;
  measured_at: string;
  host: { platform: string; arch: string; os_release: string; hostname: string };
  cpu: { model: string; cores: number; physical_cores: number };
  memory: { total_bytes: number; available_bytes: number };
  gpus: Array<{ name: string; vendor: string; vram_total_bytes: number | null; vram_free_bytes: number | null; source: string }>;
  execution_providers: ProviderProbe[];
  bandwidth: Measurements['bandwidth'];
  block: (BlockMeasurement & { key: string }) | null;
  /** This machine as a `devices` entry of a fleet file (electron/engine/planner/README.md). */
  fleet_device: { name: string; memory_bytes: number; bandwidth_gbps: number | null; block_ms: number | null; step_ms?: number; position_ms?: number; head_ms?: number };
}

/** What identifies the hardware: a different CPU, RAM size, GPU set, OS or probe means measure again. */
export function hardwareFingerprint(host: HostInfo, nativeProbe: boolean): string {
  const identity = {
    version: BENCH_VERSION,
    platform: host.platform,
    arch: host.arch,
    cpu: host.cpu,
    // Rounded to MiB: some kernels report total RAM a few kB differently across boots.
    memoryTotalMiB: Math.round(host.memory.totalBytes / 2 ** 20),
    gpus: host.gpus.map((g) => [g.vendor, g.name, g.vramTotalBytes]),
    nativeProbe,
  };
  return createHash('sha256').update(JSON.stringify(identity)).digest('hex').slice(0, 32);
}

export async function runDeviceBench(options: DeviceBenchOptions = {}): Promise<DeviceBenchJson> {
  const progress = options.onProgress ?? (() => undefined);
  const signal = options.signal;
  progress('probing CPU, memory and GPUs');
  const host = await (options.probeHost ?? probeHost)(signal);
  const nativeProbe = options.bandwidth?.addon !== undefined ? options.bandwidth.addon !== null : loadMembwAddon().ok;
  const fingerprint = hardwareFingerprint(host, nativeProbe && options.bandwidth?.method !== 'js');
  const cacheDir = options.cacheDir ?? join(kiwiCacheDir(), 'bench');
  const cachePath = join(cacheDir, `device-${fingerprint}.json`);

  let measurements = options.refresh === true ? null : await readCache(cachePath, fingerprint, progress);
  const cached = measurements !== null;
  if (measurements === null) {
    progress('checking onnxruntime execution providers');
    const providers = await probeExecutionProviders();
    signal?.throwIfAborted();
    progress('measuring memory bandwidth with every core');
    // A few messages a second at most (short rounds come fast), the last round always, with the time left.
    const rounds = new ProgressRate();
    const bw = await measureHostBandwidth({
      ...options.bandwidth,
      signal,
      onProgress: (done, total, gbps) => {
        const p = rounds.update(done, total);
        if (p === null) return;
        const left = !p.final && p.etaSeconds !== null ? `, about ${formatEta(p.etaSeconds)} left` : '';
        progress(`memory bandwidth: round ${done}/${total}: ${gbps.toFixed(1)} GB/s${left}`);
      },
    });
    const perProvider: Measurements['bandwidth']['providers'] = [];
    for (const p of providers) {
      if (!p.works || p.name === 'cpu') continue;
      signal?.throwIfAborted();
      progress(`measuring memory bandwidth through the ${p.name} execution provider`);
      const r = await measureProviderBandwidth(p.name);
      perProvider.push({ provider: p.name, gbps: round(r.gbps, 2), bytes: r.bytes, samples_gbps: r.samplesGBps.map((x) => round(x, 2)) });
    }
    measurements = {
      version: BENCH_VERSION,
      fingerprint,
      measured_at: new Date().toISOString(),
      execution_providers: providers,
      bandwidth: { ...bandwidthJson(bw), providers: perProvider },
      blocks: {},
    };
  }

  let block: DeviceBenchJson['block'] = null;
  let measuredNow = !cached;
  if (options.blockProbe !== undefined) {
    const key = options.blockProbe.key;
    const known = options.refresh === true ? undefined : measurements.blocks[key];
    if (known !== undefined) {
      block = { key, ...known };
    } else {
      progress(`timing one decoder block of ${key}`);
      const m = await options.blockProbe.run(signal);
      measurements.blocks[key] = m;
      block = { key, ...m };
      measuredNow = true;
    }
  }
  if (measuredNow) await writeCache(cacheDir, cachePath, measurements);
  return benchJson(host, measurements, !measuredNow, block);
}

function bandwidthJson(bw: BandwidthResult): Omit<Measurements['bandwidth'], 'providers'> {
  return {
    host_gbps: round(bw.gbps, 2),
    method: bw.method,
    fallback_reason: bw.fallbackReason,
    threads: bw.threads,
    bytes_per_thread: bw.bytesPerThread,
    rounds: bw.rounds,
    samples_gbps: bw.samplesGBps.map((x) => round(x, 2)),
  };
}

/** The public JSON from live host figures and (possibly cached) measurements. Pure. */
export function benchJson(host: HostInfo, m: Measurements, cached: boolean, block: DeviceBenchJson['block']): DeviceBenchJson {
  const gpuBandwidth = Math.max(0, ...m.bandwidth.providers.map((p) => p.gbps));
  const largestFreeVram = Math.max(0, ...host.gpus.map((g) => g.vramFreeBytes ?? 0));
  // A member that runs on its GPU offers its free VRAM and the bandwidth measured through the GPU's
  // provider; on the CPU, its available RAM and host bandwidth.
  const onGpu = gpuBandwidth > 0 && largestFreeVram > 0;
  return {
    version: m.version,
    fingerprint: m.fingerprint,
    cached,
    measured_at: m.measured_at,
    host: { platform: host.platform, arch: host.arch, os_release: host.osRelease, hostname: host.hostname },
    cpu: { model: host.cpu.model, cores: host.cpu.cores, physical_cores: host.cpu.physicalCores },
    memory: { total_bytes: host.memory.totalBytes, available_bytes: host.memory.availableBytes },
    gpus: host.gpus.map((g) => ({ name: g.name, vendor: g.vendor, vram_total_bytes: g.vramTotalBytes, vram_free_bytes: g.vramFreeBytes, source: g.source })),
    execution_providers: m.execution_providers,
    bandwidth: m.bandwidth,
    block,
    fleet_device: {
      name: host.hostname,
      memory_bytes: onGpu ? largestFreeVram : host.memory.availableBytes,
      bandwidth_gbps: onGpu ? gpuBandwidth : m.bandwidth.host_gbps,
      block_ms: block?.block_ms ?? null,
      ...(block?.step_ms !== undefined ? { step_ms: block.step_ms } : {}),
      ...(block?.position_ms !== undefined ? { position_ms: block.position_ms } : {}),
      ...(block?.head_ms !== undefined ? { head_ms: block.head_ms } : {}),
    },
  };
}

/** A cache entry that is missing is a miss; one that is unreadable or stale is reported and measured again. */
async function readCache(path: string, fingerprint: string, progress: (m: string) => void): Promise<Measurements | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  let parsed: ReturnType<typeof measurementsSchema.safeParse>;
  try {
    parsed = measurementsSchema.safeParse(JSON.parse(text));
  } catch (err) {
    progress(`cached result ${path} is not JSON (${(err as Error).message}); measuring again`);
    return null;
  }
  if (!parsed.success || parsed.data.fingerprint !== fingerprint) {
    progress(`cached result ${path} does not match this probe; measuring again`);
    return null;
  }
  progress(`using the cached measurements of ${parsed.data.measured_at} (hardware unchanged; --refresh measures again)`);
  return parsed.data;
}

async function writeCache(dir: string, path: string, m: Measurements): Promise<void> {
  await mkdir(dir, { recursive: true });
  // Write then rename, so a concurrent reader never sees half a file.
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(m, null, 2)}\n`);
  await rename(tmp, path);
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
