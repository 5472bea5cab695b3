// What this machine has: CPU, RAM (total and available now) and every GPU with its VRAM, from
// systeminformation, with nvidia-smi's free VRAM where the NVIDIA driver is present.
import os from 'node:os';
import si from 'systeminformation';
import { runNvidiaSmi, type NvidiaGpu } from './nvidia-smi.js';

export interface GpuInfo {
  name: string;
  vendor: string;
  vramTotalBytes: number | null;
  /** Free VRAM now; null where the platform does not tell. */
  vramFreeBytes: number | null;
  source: 'nvidia-smi' | 'systeminformation';
}

export interface HostInfo {
  platform: NodeJS.Platform;
  arch: string;
  osRelease: string;
  hostname: string;
  cpu: { model: string; cores: number; physicalCores: number };
  memory: { totalBytes: number; availableBytes: number };
  gpus: GpuInfo[];
}

const MB = 1024 * 1024;

export async function probeHost(signal?: AbortSignal): Promise<HostInfo> {
  const [cpu, mem, graphics, nvidia] = await Promise.all([si.cpu(), si.mem(), si.graphics(), runNvidiaSmi(signal)]);
  signal?.throwIfAborted();
  return {
    platform: process.platform,
    arch: process.arch,
    osRelease: os.release(),
    hostname: os.hostname(),
    cpu: {
      model: [cpu.manufacturer, cpu.brand].filter((s) => s !== '').join(' ') || (os.cpus()[0]?.model ?? 'unknown'),
      cores: os.availableParallelism(),
      physicalCores: cpu.physicalCores > 0 ? cpu.physicalCores : os.availableParallelism(),
    },
    // `available` counts reclaimable cache; `free` would understate what a model can use.
    memory: { totalBytes: mem.total, availableBytes: mem.available > 0 ? mem.available : os.freemem() },
    gpus: mergeGpus(graphics.controllers, nvidia ?? []),
  };
}

type Controller = Awaited<ReturnType<typeof si.graphics>>['controllers'][number];

/** nvidia-smi's figures win for NVIDIA boards; other controllers come from systeminformation. */
export function mergeGpus(controllers: readonly Controller[], nvidia: readonly NvidiaGpu[]): GpuInfo[] {
  const out: GpuInfo[] = nvidia.map((g) => ({
    name: g.name,
    vendor: 'NVIDIA',
    vramTotalBytes: g.memoryTotalBytes,
    vramFreeBytes: g.memoryFreeBytes,
    source: 'nvidia-smi',
  }));
  for (const c of controllers) {
    if (nvidia.length > 0 && /nvidia/i.test(`${c.vendor} ${c.model}`)) continue;
    const total = c.memoryTotal ?? c.vram ?? null;
    out.push({
      name: c.model || c.name || 'unknown GPU',
      vendor: c.vendor || 'unknown',
      vramTotalBytes: total !== null && total > 0 ? total * MB : null,
      vramFreeBytes: c.memoryFree !== undefined && c.memoryFree !== null ? c.memoryFree * MB : null,
      source: 'systeminformation',
    });
  }
  return out;
}
