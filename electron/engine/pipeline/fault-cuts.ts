// Where a fresh stage should be split so that a likely re-plan keeps most of it (issue 15). A stage
// reshapes only at its segments' boundaries (runtime/stage-segments.ts reshape): a survivor whose
// range moves after a member is lost (9-21 to 12-32: the host took 9-12, the lost member's layers
// went to it) would reopen all its layers, whole, on the recovery's critical path. So each stage
// that opens anew is split at the boundary the re-plan after losing one member would cut it at:
// the plans without each member in turn are computed as if every stage could keep any of its
// blocks, and each stage gets the one cut that keeps the most of it in any of them. A cut costs the
// stage one more hop to a session's thread per step, so it is made only where it spares reopening
// CUT_MIN_BYTES; small models, whose sessions open in well under a second, stay in one session.
// Pure.
import type { RingStage } from './session-fleet.js';

/** A cut is worth a hop per step only where it spares reopening this many bytes of weights as the runtime keeps them (2-3 s of prepacking on two cores; six blocks of an 8B Q4_0). */
export const CUT_MIN_BYTES = 1024 ** 3;

/**
 * `order` with a cut added to each stage that `opensAnew` where the plan without one member
 * (`replanWithout(peer)`, undefined where none fits) keeps at least `minBytes` of it on one side
 * of one boundary inside it (`blockBytes`: one block's resident bytes).
 */
export function withFaultCuts(
  order: readonly RingStage[],
  opensAnew: (i: number) => boolean,
  blockBytes: number,
  minBytes: number,
  replanWithout: (peer: number) => readonly RingStage[] | undefined,
): RingStage[] {
  const best = order.map(() => ({ cut: -1, kept: 0 }));
  for (const lost of order.slice(1)) {
    const next = replanWithout(lost.peer);
    if (next === undefined) continue;
    order.forEach((cur, i) => {
      if (cur.peer === lost.peer || cur.cuts.length > 0 || !opensAnew(i)) return;
      const n = next.find((s) => s.peer === cur.peer);
      if (n === undefined) return;
      const inside = [n.start, n.end].filter((c) => c > cur.start && c < cur.end);
      const kept = Math.min(n.end, cur.end) - Math.max(n.start, cur.start);
      if (inside.length !== 1 || kept * blockBytes < minBytes || kept <= best[i]!.kept) return;
      best[i] = { cut: inside[0]!, kept };
    });
  }
  return order.map((s, i) => (best[i]!.cut >= 0 ? { ...s, cuts: [best[i]!.cut] } : s));
}
