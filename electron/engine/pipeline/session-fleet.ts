// The planner's view of a live session (pure): the host and its active members as fleet devices,
// from the device summaries members reported (`kiwi bench --json`: fleet_device) or, for a member
// that sent none, the host's own measurement as a stand-in; ring link RTTs as measured pairs.
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import type { DeviceSpec, Fleet, LayerRange, ModelSizes, PairRtt, RunningRange } from '../planner/fleet.js';
import { natFromCapabilities } from '../planner/nat-capabilities.js';
import { planFleet } from '../planner/plan.js';
import { toPlanJson, type PlanJson } from '../planner/plan-json.js';

export interface SessionDevice {
  /** 0: the host; else the member's peer number. */
  peer: number;
  name: string;
  capabilities: Readonly<Record<string, unknown>> | undefined;
  /** Memory it can give now, when less than its capabilities say (it asked to shrink). */
  memoryBytes?: number;
  /** Blocks it holds now (its stage, built and standby layers; the host: all): a re-plan keeps them where it can. */
  holds?: readonly LayerRange[];
  /** The range its stage runs in the ring being served: a re-plan that moves as little keeps it. */
  runs?: RunningRange;
  /** Its advertised direct addresses (none: relay only); the planner predicts its links from them and its NAT. */
  addresses?: readonly string[];
  /** Its block time as the ring measured it (stage-drift-monitor.ts): replaces what it reported. */
  blockMs?: number;
  /** With blockMs: the fixed part of a step that measurement kept (absent: 0). */
  stepMs?: number;
}

const fleetDevice = z.object({
  memory_bytes: z.number().int().positive(),
  bandwidth_gbps: z.number().positive().nullable().optional(),
  block_ms: z.number().positive().nullable().optional(),
  step_ms: z.number().nonnegative().nullable().optional(),
  position_ms: z.number().nonnegative().nullable().optional(),
  head_ms: z.number().nonnegative().nullable().optional(),
});

/**
 * A member's reported device, or undefined when it reported nothing usable. A device bench's free
 * memory and a --memory-mb budget (memory_budget_bytes) are what the whole process may use, so the
 * runtime's own memory is planned out of them (DeviceSpec.memoryCoversRuntime); a bare
 * fleet_device figure is memory for the model.
 */
export function deviceFromCapabilities(capabilities: Readonly<Record<string, unknown>> | undefined): Omit<DeviceSpec, 'name'> | undefined {
  const r = fleetDevice.safeParse(capabilities?.fleet_device ?? capabilities);
  if (!r.success) return undefined;
  const wholeProcess = capabilities?.memory_budget_bytes !== undefined || (capabilities?.bandwidth !== undefined && capabilities?.memory !== undefined);
  return {
    memoryBytes: r.data.memory_bytes,
    ...(wholeProcess ? { memoryCoversRuntime: true } : {}),
    ...(r.data.bandwidth_gbps != null ? { bandwidthGBps: r.data.bandwidth_gbps } : {}),
    ...(r.data.block_ms != null ? { blockMs: r.data.block_ms } : {}),
    ...(r.data.block_ms != null && r.data.step_ms != null ? { stepMs: r.data.step_ms } : {}),
    ...(r.data.block_ms != null && r.data.position_ms != null ? { positionMs: r.data.position_ms } : {}),
    ...(r.data.block_ms != null && r.data.head_ms != null ? { headMs: r.data.head_ms } : {}),
  };
}

/** The probe's head time scaled by a measured block time against the probe's, or nothing where either is missing. */
function measuredHead(spec: Omit<DeviceSpec, 'name'>, blockMs: number): { headMs?: number } {
  return spec.headMs !== undefined && spec.blockMs !== undefined ? { headMs: spec.headMs * (blockMs / spec.blockMs) } : {};
}

export interface SessionFleetInput {
  model: ModelSizes;
  context: number;
  concurrency: number;
  /** The host first. */
  devices: readonly SessionDevice[];
  /** What stands in for a device that reported nothing (the host's own measurement). */
  fallback: Omit<DeviceSpec, 'name'>;
  links: ReadonlyArray<{ a: number; b: number; rttMs: number | undefined }>;
  /** The ring's measured cost per hop beyond the links' one-way times (stage-drift-monitor.ts): every device's hopMs. */
  hopMs?: number;
  /** The share of the bottleneck a re-plan may give up to keep what devices hold (planner PlanOptions.moveMargin). */
  moveMargin?: number;
  /** After a loss: the blocks of reopening one more block on the bottleneck stage must spare (planner PlanOptions.reopenSlackBlocks). */
  reopenSlackBlocks?: number;
}

/** The fleet and, per fleet device index, the session peer it stands for. Names are made unique. */
export function sessionFleet(input: SessionFleetInput): { fleet: Fleet; peers: number[] } {
  const used = new Set<string>();
  const names = input.devices.map((d) => {
    let name = d.name.slice(0, 120) || `peer-${d.peer}`;
    for (let i = 2; used.has(name); i++) name = `${d.name.slice(0, 110)}#${i}`;
    used.add(name);
    return name;
  });
  // Bandwidth is used only when every device has it (chooseTier); a stand-in keeps the tier uniform.
  const devices: DeviceSpec[] = input.devices.map((d, i) => {
    const spec = deviceFromCapabilities(d.capabilities) ?? input.fallback;
    return {
      name: names[i]!,
      ...spec,
      ...natFromCapabilities(d.capabilities, d.addresses),
      ...(d.memoryBytes !== undefined ? { memoryBytes: Math.min(d.memoryBytes, spec.memoryBytes) } : {}),
      // The ring's measured block time, with the fixed part of a step it kept (stage-drift-monitor.ts
      // splitMeasured); the probe's head time scales with it (a device that runs its blocks slower
      // than it reported runs its head slower alike).
      ...(d.blockMs !== undefined ? { blockMs: d.blockMs, stepMs: d.stepMs ?? 0, ...measuredHead(spec, d.blockMs) } : {}),
      ...(input.hopMs !== undefined ? { hopMs: input.hopMs } : {}),
      // The host (devices[0]) serves the API as well: its process holds more than a member's runtime.
      ...(i === 0 && spec.memoryCoversRuntime === true ? { servesApi: true } : {}),
      ...(d.holds !== undefined && d.holds.length > 0 ? { holds: d.holds.map((r) => ({ start: r.start, end: r.end })) } : {}),
      ...(d.runs !== undefined ? { runs: { start: d.runs.start, end: d.runs.end, ...(d.runs.grows === true ? { grows: true } : {}), ...(d.runs.cuts !== undefined ? { cuts: d.runs.cuts } : {}), ...(d.runs.everyCut === true ? { everyCut: true } : {}) } } : {}),
    };
  });
  const index = new Map(input.devices.map((d, i) => [d.peer, i]));
  const rtts: PairRtt[] = [];
  for (const l of input.links) {
    const a = index.get(l.a);
    const b = index.get(l.b);
    if (a !== undefined && b !== undefined && l.rttMs !== undefined) rtts.push({ a: names[a]!, b: names[b]!, rttMs: l.rttMs });
  }
  return {
    fleet: { model: input.model, context: input.context, concurrency: input.concurrency, devices, rtts },
    peers: input.devices.map((d) => d.peer),
  };
}

export interface RingStage {
  /** Session peer (0: the host). */
  peer: number;
  start: number;
  end: number;
  head: boolean;
  /** The boundaries between the sessions its stage runs in (planner/moves.ts stageCuts, fault-cuts.ts). */
  cuts: readonly number[];
}

/**
 * Plans the ring of a session: the host (devices[0]) always holds the head, since it serves the
 * API; returns the stages in ring order from the host, and the plan as `kiwi plan` prints it.
 * Throws PLAN_INSUFFICIENT_MEMORY (naming the device short of memory) when the model does not fit.
 */
export function planRing(input: SessionFleetInput): { plan: PlanJson; stages: RingStage[] } {
  const { fleet, peers } = sessionFleet(input);
  const hostName = fleet.devices[0]!.name;
  const result = planFleet(fleet, { currentHead: hostName, anchorMargin: Number.POSITIVE_INFINITY, ...(input.moveMargin !== undefined ? { moveMargin: input.moveMargin } : {}), ...(input.reopenSlackBlocks !== undefined ? { reopenSlackBlocks: input.reopenSlackBlocks } : {}) });
  if (result.head !== 0) {
    throw new KiwiError(
      'PLAN_INSUFFICIENT_MEMORY',
      `The host (${hostName}) cannot hold the head (embedding and output projection) with any share of the blocks; use a host with more memory.`,
      { device: hostName },
    );
  }
  return {
    plan: toPlanJson(fleet, result),
    stages: result.division.stages.map((s) => ({ peer: peers[s.device]!, start: s.start, end: s.end, head: s.head, cuts: s.cuts })),
  };
}
