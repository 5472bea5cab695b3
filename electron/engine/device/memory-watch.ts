// Watches this machine's free memory while it runs a stage, so a member can ask the host for fewer
// layers before it runs out (someone starts a game and the GPU memory vanishes) instead of
// crashing. Free memory is read from the execution provider's device: VRAM via nvidia-smi for
// CUDA, RAM otherwise (DirectML exposes no free-VRAM figure to Node). Hysteresis keeps one dip
// from flapping the ring: low below keepFreeBytes, fine again only above 1.25 times that.
import { freemem } from 'node:os';
import { runNvidiaSmi } from './nvidia-smi.js';

export interface MemoryWatchOptions {
  /** Bytes of free memory to leave to the machine's other programs. */
  keepFreeBytes: number;
  readFreeBytes: () => Promise<number>;
  intervalMs?: number;
  /** Called when free memory crosses the threshold (low) and when it recovers. */
  onChange: (low: boolean, freeBytes: number) => void;
}

export interface MemoryWatch {
  /** Reads free memory once now (the timer does this every intervalMs). */
  check(): Promise<void>;
  stop(): void;
}

const RECOVER_FACTOR = 1.25;

export function watchFreeMemory(opts: MemoryWatchOptions): MemoryWatch {
  let low = false;
  let stopped = false;
  const check = async (): Promise<void> => {
    let free: number;
    try {
      free = await opts.readFreeBytes();
    } catch {
      return; // an unreadable figure (nvidia-smi gone) is no reason to shrink
    }
    if (stopped || !Number.isFinite(free)) return;
    if (!low && free < opts.keepFreeBytes) {
      low = true;
      opts.onChange(true, free);
    } else if (low && free > opts.keepFreeBytes * RECOVER_FACTOR) {
      low = false;
      opts.onChange(false, free);
    }
  };
  const timer = setInterval(() => void check(), opts.intervalMs ?? 2000);
  timer.unref();
  return {
    check,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}

/** Free memory of the device a provider runs on: the least free VRAM of the GPUs for CUDA, else RAM. */
export function freeMemoryReader(provider: string | undefined): () => Promise<number> {
  if (provider !== 'cuda') return () => Promise.resolve(freemem());
  return async () => {
    const gpus = await runNvidiaSmi();
    if (gpus === null || gpus.length === 0) return freemem();
    return Math.min(...gpus.map((g) => g.memoryFreeBytes));
  };
}
