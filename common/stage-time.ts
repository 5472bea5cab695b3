// A ring stage's time as the UI shows it (issue 14): measured beside the planner's prediction, so a
// stage that drifted from its plan is visible before (and after) the host re-plans it.
import type { StageWire } from './control-api.js';

function ms(x: number): string {
  if (x >= 1000) return `${(x / 1000).toFixed(1)} s`;
  return x < 10 ? `${x.toFixed(2)} ms` : `${x.toFixed(0)} ms`;
}

/** "4.45 ms (plan 0.30 ms)" when both are known, else whichever is, else null. */
export function stageTimeText(s: Pick<StageWire, 'stage_ms' | 'predicted_ms' | 'measured_ms'>): string | null {
  const measured = s.measured_ms ?? null;
  const predicted = s.predicted_ms ?? null;
  if (measured !== null && predicted !== null) return `${ms(measured)} (plan ${ms(predicted)})`;
  if (measured !== null) return ms(measured);
  if (predicted !== null) return `${ms(predicted)} planned`;
  return s.stage_ms !== null ? ms(s.stage_ms) : null;
}
