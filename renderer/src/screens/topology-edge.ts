// What the topology says of one ring link beyond its label: what it runs over (direct UDP through
// ICE, direct TCP over a WebSocket, relayed by the rendezvous) next to what the planner predicted
// from the members' NATs, and whether the two differ. The label itself stays "direct · 1.2 ms";
// this goes into the link's tooltip and data attributes.
import type { EdgeWire, LinkWire, ReachWire } from '../../../common/control-api.js';
import { formatMs } from '../ui.js';

const REACH_TEXT: Record<ReachWire, string> = { 'direct-udp': 'direct UDP', 'direct-tcp': 'direct TCP', relayed: 'relayed' };

export interface EdgeDetail {
  /** e.g. "direct UDP · 1.20 ms (predicted: direct UDP)"; null when nothing is known beyond the label. */
  title: string | null;
  actual: ReachWire | null;
  predicted: ReachWire | null;
  /** true: the link became something other than the prediction. */
  mismatch: boolean;
}

export function edgeBetween(edges: readonly EdgeWire[] | undefined, a: number, b: number): EdgeWire | undefined {
  return edges?.find((e) => (e.a === a && e.b === b) || (e.a === b && e.b === a));
}

export function edgeDetail(link: LinkWire | undefined, edge: EdgeWire | undefined): EdgeDetail {
  const actual = edge?.actual ?? null;
  const predicted = edge?.predicted ?? null;
  const mismatch = edge?.matched === false;
  if (actual === null && predicted === null) return { title: null, actual, predicted, mismatch };
  const now = actual !== null ? `${REACH_TEXT[actual]} · ${formatMs(edge?.rtt_ms ?? link?.rtt_ms)}` : (link?.state ?? 'connecting');
  const expected = predicted === null ? '' : mismatch ? ` (predicted ${REACH_TEXT[predicted]}: not what it became)` : ` (predicted: ${REACH_TEXT[predicted]})`;
  return { title: `${now}${expected}`, actual, predicted, mismatch };
}
