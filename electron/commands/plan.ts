// `kiwi plan --fleet F [--json]`: divides a model over a fleet (electron/engine/planner/README.md
// documents the file and the output). The only I/O here: reading the fleet file and, for a
// `{"gguf": path}` model, that file's header.
import { readFile, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { KiwiError } from '../engine/errors.js';
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { parseFleetFile, withModelSizes, type Fleet } from '../engine/planner/fleet.js';
import { planFleet } from '../engine/planner/plan.js';
import { toPlanJson, type PlanJson } from '../engine/planner/plan-json.js';
import { modelSizesFromGguf } from '../engine/planner/model-sizes.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';

/** A fleet file is a few kB; refuse anything absurd before reading it. */
const MAX_FLEET_FILE_BYTES = 4 * 1024 * 1024;

// Moved to the engine so that the UI's hosting (engine/server) sizes the model the same way.
export { KV_BYTES_PER_ELEMENT, modelSizesFromSummary } from '../engine/planner/model-sizes.js';

export const planCommand = defineCommand({
  name: 'plan',
  summary: 'Divide a model over a fleet of devices so the slowest stage is as short as possible',
  description:
    'Reads a fleet file (model sizes or a GGUF path, context, concurrency, devices with memory and measured speed, RTTs) ' +
    'and prints the ring order, the head, each device\'s layer range and cost, and the uniform and memory-proportional ' +
    'baselines. Exits non-zero with PLAN_INSUFFICIENT_MEMORY, naming the device and how many bytes it lacks, when the ' +
    'fleet cannot hold the model. Format: electron/engine/planner/README.md.',
  positionals: [],
  options: {
    fleet: { type: 'string', valueName: 'FILE', description: 'Fleet file (JSON)' },
    json: { type: 'boolean', description: 'Print the plan as one JSON object' },
  },
  async run(ctx) {
    const path = stringOption(ctx, 'fleet');
    if (path === undefined) throw new KiwiError('USAGE', "missing --fleet FILE. Run 'kiwi plan --help'.");
    const fleet = await loadFleet(path);
    const plan = toPlanJson(fleet, planFleet(fleet));
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, plan);
    else ctx.stdout.write(formatPlan(fleet, plan));
    return 0;
  },
});

/** Reads and validates a fleet file; a GGUF model path is resolved relative to the file. */
export async function loadFleet(path: string): Promise<Fleet> {
  const info = await stat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') throw new KiwiError('FILE_NOT_FOUND', `fleet file '${path}' does not exist`);
    throw err;
  });
  if (info.size > MAX_FLEET_FILE_BYTES) {
    throw new KiwiError('FLEET_INVALID', `fleet file '${path}' is ${info.size} bytes; a fleet file is at most ${MAX_FLEET_FILE_BYTES}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    if (err instanceof SyntaxError) throw new KiwiError('FLEET_INVALID', `fleet file '${path}' is not JSON: ${err.message}`);
    throw err;
  }
  const file = parseFleetFile(value);
  const model = file.model;
  if (!('gguf' in model)) return { ...file, model };
  const ggufPath = resolve(dirname(path), model.gguf);
  return withModelSizes(file, modelSizesFromGguf(await openGguf(ggufPath)));
}

function formatPlan(fleet: Fleet, plan: PlanJson): string {
  const unit = plan.tier === 'memory' ? '' : ' ms';
  const num = (x: number | null): string => (x === null ? '-' : x.toFixed(2));
  const gib = (b: number): string => (b / 2 ** 30).toFixed(2);
  const lines = [
    `model ${fleet.model.name}: ${fleet.model.layers} blocks, context ${fleet.context} × ${fleet.concurrency} requests, tier ${plan.tier}`,
    `ring: ${plan.order.join(' → ')} → ${plan.order[0] ?? ''} (head: ${plan.head})`,
    '',
  ];
  const width = Math.max(6, ...plan.stages.map((s) => s.device.length));
  // Fetches are news only when some device said what it holds (otherwise every stage fetches all).
  const holding = fleet.devices.some((d) => (d.holds?.length ?? 0) > 0);
  lines.push(`${'device'.padEnd(width)}  layers      stage${unit.padEnd(3)}  memory GiB`);
  for (const s of plan.stages) {
    const memory = fleet.devices.find((d) => d.name === s.device)?.memoryBytes ?? 0;
    lines.push(
      `${s.device.padEnd(width)}  ${`[${s.start}, ${s.end})`.padEnd(10)}  ${num(s.stage_ms).padStart(8)}  ${gib(s.memory_bytes)} of ${gib(memory)}${s.head ? '  (head)' : ''}${holding ? `  fetch ${gib(s.fetch_bytes)} GiB` : ''}`,
    );
  }
  lines.push('');
  lines.push(`bottleneck ${num(plan.bottleneck_ms)}${unit}, circuit ${num(plan.circuit_ms)}${unit}, utilization ${(plan.utilization * 100).toFixed(0)}%`);
  for (const [name, b] of Object.entries(plan.baselines)) {
    lines.push(`${name.padEnd(12)} bottleneck ${num(b.bottleneck_ms)}${unit}, utilization ${(b.utilization * 100).toFixed(0)}%${b.fits ? '' : ', does not fit in memory'}`);
  }
  return `${lines.join('\n')}\n`;
}
