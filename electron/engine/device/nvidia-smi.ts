// Free VRAM of NVIDIA GPUs from `nvidia-smi` (systeminformation reports totals, and free memory
// only on some platforms). The parser is pure; runNvidiaSmi is the one place that spawns it.
import { execFile } from 'node:child_process';

export interface NvidiaGpu {
  index: number;
  name: string;
  uuid: string;
  memoryTotalBytes: number;
  memoryFreeBytes: number;
}

/** The query runNvidiaSmi sends; parseNvidiaSmi expects its columns in this order. */
export const NVIDIA_SMI_ARGS = ['--query-gpu=index,name,uuid,memory.total,memory.free', '--format=csv,noheader,nounits'];

const MIB = 1024 * 1024;
/** Output beyond this is not nvidia-smi answering our query. */
const MAX_OUTPUT_BYTES = 1024 * 1024;

/** Parses `nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.free --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(text: string): NvidiaGpu[] {
  const gpus: NvidiaGpu[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') continue;
    const cols = line.split(',').map((c) => c.trim());
    if (cols.length !== 5) throw new Error(`unexpected nvidia-smi line: ${line}`);
    const [index, name, uuid, total, free] = cols as [string, string, string, string, string];
    const totalMiB = Number(total);
    const freeMiB = Number(free);
    // "[N/A]" appears for some fields on some boards; such a GPU has no usable figure.
    if (!Number.isFinite(totalMiB) || !Number.isFinite(freeMiB) || !/^\d+$/.test(index)) continue;
    gpus.push({ index: Number(index), name, uuid, memoryTotalBytes: totalMiB * MIB, memoryFreeBytes: freeMiB * MIB });
  }
  return gpus;
}

/** Runs nvidia-smi; resolves null when it is not installed (no NVIDIA driver), rejects on other failures. */
export function runNvidiaSmi(signal?: AbortSignal): Promise<NvidiaGpu[] | null> {
  return new Promise((resolve, reject) => {
    execFile('nvidia-smi', NVIDIA_SMI_ARGS, { timeout: 10_000, maxBuffer: MAX_OUTPUT_BYTES, windowsHide: true, signal }, (err, stdout) => {
      if (err !== null) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') resolve(null);
        else reject(new Error(`nvidia-smi failed: ${err.message}`));
        return;
      }
      try {
        resolve(parseNvidiaSmi(stdout));
      } catch (parseErr) {
        reject(parseErr);
      }
    });
  });
}
