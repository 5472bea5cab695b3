// Whether a member's whole-process memory budget (`kiwi join --memory-mb`, reported as
// capabilities.memory_budget_bytes) can hold anything of the session's model: the runtime of a
// stage process (stageOverheadAt: its fixed overhead and context scratch), one block as the
// runtime keeps it and that block's KV cache at the session's context. A budget below that is
// refused at join with the figure it would need, instead of being left out by the planner without
// a word. Pure, apart from MemberBudgets' lazy read of the context.
import { KiwiError } from '../errors.js';
import { stageOverheadAt, type ModelSizes } from '../planner/fleet.js';
import type { BudgetTooSmall } from './ring-protocol.js';

const MIB = 2 ** 20;

/** The member's budget in bytes, when it reported one. */
export function reportedBudgetBytes(capabilities: Readonly<Record<string, unknown>> | undefined): number | undefined {
  const b = capabilities?.memory_budget_bytes;
  return typeof b === 'number' && Number.isFinite(b) && b >= 0 ? b : undefined;
}

/**
 * What one layer needs in a member process, in whole MiB (each part rounded up, so the sum is
 * never below the bytes): runtime + one block's resident bytes + its KV at `context` × `concurrency`
 * and its share of the prompt cache.
 */
export function oneLayerNeed(sizes: ModelSizes, context: number, concurrency = 1): { runtimeMib: number; layerMib: number; kvMib: number; neededMib: number } {
  const runtimeMib = Math.ceil(stageOverheadAt(sizes, context, concurrency) / MIB);
  const layerMib = Math.ceil((sizes.blockResidentBytes ?? sizes.blockBytes) / MIB);
  const kvMib = Math.ceil((sizes.kvBytesPerTokenPerLayer * context * concurrency + (sizes.promptCacheBytesPerBlock ?? 0)) / MIB);
  return { runtimeMib, layerMib, kvMib, neededMib: runtimeMib + layerMib + kvMib };
}

/** The refusal to send a member whose budget cannot hold one layer; undefined when it can (or set no budget). */
export function budgetRefusal(capabilities: Readonly<Record<string, unknown>> | undefined, sizes: ModelSizes, context: number, concurrency = 1): BudgetTooSmall | undefined {
  const budget = reportedBudgetBytes(capabilities);
  if (budget === undefined) return undefined;
  const need = oneLayerNeed(sizes, context, concurrency);
  if (budget >= need.neededMib * MIB) return undefined;
  return { kind: 'budget-too-small', budgetMib: Math.floor(budget / MIB), ...need, context };
}

/** The member's error: what it prints before it exits. */
export function budgetTooSmallError(r: BudgetTooSmall): KiwiError {
  return new KiwiError(
    'MEMORY_BUDGET_TOO_SMALL',
    `--memory-mb ${r.budgetMib} cannot hold one layer: this model needs at least ${r.neededMib} MiB per member ` +
      `(runtime ${r.runtimeMib} + one layer ${r.layerMib} + KV ${r.kvMib} at a context of ${r.context}); rerun with --memory-mb ${r.neededMib} or more`,
    { needed_mib: r.neededMib, budget_mib: r.budgetMib },
  );
}

/** The host's warning about a member it refused. */
export function budgetRefusedWarning(name: string, r: BudgetTooSmall): KiwiError {
  return new KiwiError(
    'MEMORY_BUDGET_TOO_SMALL',
    `${name}'s memory budget (${r.budgetMib} MiB) cannot hold one layer of this model (at least ${r.neededMib} MiB: runtime ${r.runtimeMib} + one layer ${r.layerMib} + KV ${r.kvMib}); it is not planned.`,
    { member: name, needed_mib: r.neededMib, budget_mib: r.budgetMib },
  );
}

export interface BudgetMember {
  memberId: string;
  name: string;
  capabilities: Readonly<Record<string, unknown>> | undefined;
}

/**
 * The host's verdicts: verdict() is 'ok', 'refused', or undefined while the session's context is
 * still being read (onChange fires once it is). Capabilities may arrive after the join, so callers
 * ask again whenever they are about to count or plan members. A member is told (onRefuse) once per budget it reports.
 */
export class MemberBudgets {
  private context: number | undefined;
  private loading: Promise<void> | undefined;
  private readonly told = new Map<string, number>();

  constructor(
    private readonly sizes: ModelSizes,
    private readonly concurrency: number,
    private readonly readContext: () => Promise<number>,
    private readonly onRefuse: (m: BudgetMember, r: BudgetTooSmall) => void,
    private readonly onChange: () => void,
  ) {}

  /** `context`: the session's, when the caller knows it (it planned with it). */
  verdict(m: BudgetMember, context?: number): 'ok' | 'refused' | undefined {
    this.context ??= context;
    if (reportedBudgetBytes(m.capabilities) === undefined) return 'ok';
    if (this.context === undefined) {
      this.loading ??= this.readContext().then(
        (c) => {
          this.context = c;
          this.onChange();
        },
        () => {
          this.loading = undefined; // the host's own model load reports what is wrong with the file
        },
      );
      return undefined;
    }
    const r = budgetRefusal(m.capabilities, this.sizes, this.context, this.concurrency);
    if (r === undefined) return 'ok';
    if (this.told.get(m.memberId) !== r.budgetMib) {
      this.told.set(m.memberId, r.budgetMib);
      this.onRefuse(m, r);
    }
    return 'refused';
  }

  /** A member that left and comes back is told again. */
  forget(memberId: string): void {
    this.told.delete(memberId);
  }
}

/**
 * The model's sizes with each block's share of a prompt cache of `cacheBytes`: the host bounds the
 * entries' bytes over all `sizes.layers` layers (runtime/prefix-cache.ts) and every stage keeps its
 * layers' part of each entry, so a block holds at most cacheBytes / layers; the planner adds it to a
 * stage's memory per block, and oneLayerNeed to a member's KV.
 */
export function promptCacheSizes(sizes: ModelSizes, cacheBytes: number): ModelSizes {
  if (!(cacheBytes > 0)) return sizes;
  return { ...sizes, promptCacheBytesPerBlock: Math.ceil(cacheBytes / sizes.layers) };
}
