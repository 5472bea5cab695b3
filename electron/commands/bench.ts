// `kiwi bench [--model M] [--json] [--refresh]`: what this device offers a session (memory, GPUs,
// working execution providers, measured memory bandwidth, and with --model the time of one decoder
// block of that model), cached per hardware. Progress goes to stderr so that stdout stays one JSON
// object with --json. The composition of the runtime's block probe and the device bench lives here:
// device/ and runtime/ do not import each other.
import { KiwiError } from '../engine/errors.js';
import { runDeviceBench, type BlockProbe, type DeviceBenchJson } from '../engine/device/device-bench.js';
import { hugePagesFacts, hugePagesInWords } from '../engine/device/huge-pages.js';
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { blockProbeKey, blockShapeOf, measureBlock } from '../engine/runtime/block-probe.js';
import type { ExecutionProvider } from '../engine/ort/session.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';

export const benchCommand = defineCommand({
  name: 'bench',
  summary: 'Measure what this device can give a session: memory, GPUs, execution providers, memory bandwidth',
  description:
    'Memory bandwidth is measured with every core by the native probe (native/), or by a slower JS fallback that the ' +
    'output names (bandwidth.method). Results are cached per hardware fingerprint under the Kiwi cache folder ' +
    '($KIWI_CACHE_DIR) and reused until the hardware changes. fleet_device is this machine as an entry of a fleet file ' +
    'for `kiwi plan`.',
  positionals: [],
  options: {
    json: { type: 'boolean', description: 'Print one JSON object' },
    refresh: { type: 'boolean', description: 'Measure again even if a cached result matches this hardware' },
    bandwidth: { type: 'string', valueName: 'METHOD', description: 'Bandwidth probe: auto, native or js', default: 'auto' },
    model: { type: 'string', valueName: 'FILE', description: "Also time one decoder block of this GGUF model's shape and weight type (random weights)" },
    provider: { type: 'string', valueName: 'EP', description: 'Execution provider of the block probe: cpu, cuda or dml (default: best available)' },
  },
  async run(ctx) {
    const method = stringOption(ctx, 'bandwidth') ?? 'auto';
    if (method !== 'auto' && method !== 'native' && method !== 'js') {
      throw new KiwiError('USAGE', `--bandwidth must be auto, native or js, not '${method}'`);
    }
    const onProgress = (message: string): void => void ctx.stderr.write(`kiwi bench: ${message}\n`);
    const modelPath = stringOption(ctx, 'model');
    const provider = stringOption(ctx, 'provider');
    if (provider !== undefined && !PROVIDERS.includes(provider as ExecutionProvider)) {
      throw new KiwiError('USAGE', `--provider must be one of ${PROVIDERS.join(', ')}, got '${provider}'`);
    }
    const blockProbe = modelPath !== undefined ? await blockProbeFor(modelPath, provider as ExecutionProvider | undefined, onProgress) : undefined;
    const result = await runDeviceBench({
      refresh: booleanOption(ctx, 'refresh'),
      signal: ctx.signal,
      bandwidth: { method },
      onProgress,
      ...(blockProbe !== undefined ? { blockProbe } : {}),
    });
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, result);
    else ctx.stdout.write(formatBench(result));
    return 0;
  },
});

const PROVIDERS: readonly ExecutionProvider[] = ['cpu', 'cuda', 'dml'];

/** The device bench's seam filled with the runtime's probe: one block of the model's shape, cached per shape and provider. */
export async function blockProbeFor(
  modelPath: string,
  provider: ExecutionProvider | undefined,
  onProgress: (m: string) => void,
  threads?: number,
): Promise<BlockProbe> {
  const shape = blockShapeOf(await openGguf(modelPath));
  return {
    key: blockProbeKey(shape, provider ?? 'auto') + (threads !== undefined ? `:t${threads}` : ''),
    async run(signal) {
      const r = await measureBlock(shape, {
        ...(provider !== undefined ? { provider } : {}),
        ...(threads !== undefined ? { threads } : {}),
        ...(signal !== undefined ? { signal } : {}),
        onProgress,
      });
      const ms = (v: number): number => Math.round(v * 1000) / 1000;
      return { block_ms: ms(r.blockMs), step_ms: ms(r.stepMs), position_ms: Math.round(r.positionMs * 1e7) / 1e7, ...(r.headMs !== undefined ? { head_ms: ms(r.headMs) } : {}), runs: r.runs, provider: r.provider };
    },
  };
}

function formatBench(r: DeviceBenchJson): string {
  const gib = (b: number | null): string => (b === null ? '?' : `${(b / 2 ** 30).toFixed(1)} GiB`);
  const rows: Array<[string, string]> = [
    ['cpu', `${r.cpu.model}, ${r.cpu.cores} threads (${r.cpu.physical_cores} cores)`],
    ['memory', `${gib(r.memory.available_bytes)} available of ${gib(r.memory.total_bytes)}`],
    ...r.gpus.map((g, i): [string, string] => [`gpu ${i}`, `${g.vendor} ${g.name}, ${gib(g.vram_free_bytes)} free of ${gib(g.vram_total_bytes)}`]),
    ['providers', r.execution_providers.map((p) => `${p.name} ${p.works ? 'works' : `no (${p.error ?? ''})`}`).join('; ')],
    [
      'bandwidth',
      `${r.bandwidth.host_gbps.toFixed(1)} GB/s host (${r.bandwidth.method}, ${r.bandwidth.threads} threads)` +
        (r.bandwidth.fallback_reason !== null ? ` — fallback: ${r.bandwidth.fallback_reason}` : ''),
    ],
    ...r.bandwidth.providers.map((p): [string, string] => [`bw ${p.provider}`, `${p.gbps.toFixed(1)} GB/s through the ${p.provider} execution provider`]),
    ...(r.block !== null
      ? [['block', `${r.block.block_ms} ms per decoder block + ${r.block.step_ms ?? 0} ms per step${r.block.head_ms !== undefined ? ` + ${r.block.head_ms} ms for the head` : ''} + ${r.block.position_ms !== undefined ? (r.block.position_ms * 1000).toFixed(2) : '?'} µs per block per cached position (${r.block.provider}, median of ${r.block.runs}; ${r.block.key})`] as [string, string]]
      : []),
    ['huge pages', hugePagesInWords(hugePagesFacts())],
    ['measured', `${r.measured_at}${r.cached ? ' (cached)' : ''}`],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  return `${rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n')}\n`;
}
