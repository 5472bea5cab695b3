// Where the ring view (renderer/src/screens/topology.tsx) puts its nodes and labels, computed
// without a DOM so it can be tested: peers on a circle, each node's label outside the circle
// along its radius, each link's label beside the link's midpoint along the link's normal (inside
// the ring first, outside for a ring of three; a step further when something is in the way, never
// nearer another link than its own). Every label is kept clear of every node, every link and every
// other label; when they do not fit, the circle grows. Text widths
// come from a `measure` function (the renderer measures with the real font; the default estimates
// generously). Also how layer ranges read: see layerRangeText.

export type LabelFont = 'name' | 'detail' | 'edge';

/** Font size (px) and weight of each kind of label; styles.css gives the same. */
export const LABEL_FONTS: Record<LabelFont, { size: number; weight: number }> = {
  name: { size: 13, weight: 600 },
  detail: { size: 11, weight: 400 },
  edge: { size: 12, weight: 400 },
};

export type Measure = (text: string, font: LabelFont) => number;

/** Wider than most sans-serif fonts set these sizes, so an estimate errs on the side of room. */
export const estimateWidth: Measure = (text, font) => {
  const f = LABEL_FONTS[font];
  return text.length * f.size * (f.weight >= 600 ? 0.66 : 0.6);
};

export interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface LabelLine {
  text: string;
  font: LabelFont;
}

export interface PlacedLine extends LabelLine {
  /** Text anchored in the middle at x, baseline at y. */
  x: number;
  y: number;
}

export interface PlacedLabel {
  box: Box;
  lines: PlacedLine[];
}

export interface LayoutNode {
  id: string;
  x: number;
  y: number;
  label: PlacedLabel;
}

export interface RingLayoutInput {
  /** Peers in ring order; the first sits at the top. */
  ring: Array<{ id: string; lines: LabelLine[] }>;
  /** Peers out of the ring: a column beside it. */
  out?: Array<{ id: string; lines: LabelLine[] }>;
  /** Links between ring nodes (indices into `ring`) with their label. */
  edges: Array<{ from: number; to: number; label: string }>;
  measure?: Measure;
}

export interface RingLayout {
  viewBox: Box;
  cx: number;
  cy: number;
  radius: number;
  ring: LayoutNode[];
  out: LayoutNode[];
  edges: Array<{ from: number; to: number; label: PlacedLabel }>;
  /** False only when even the largest circle left labels touching (never seen for 2 to 9 peers). */
  clear: boolean;
}

export const NODE_RADIUS = 26;
/** Space kept between any two labels, and between a label and a node. */
const GAP = 6;
const LINE_HEIGHT = 1.3;
const MIN_RADIUS = 120;
const MAX_RADIUS = 720;
const RADIUS_STEP = 15;

function overlaps(a: Box, b: Box, gap = GAP): boolean {
  return a.x < b.x + b.w + gap && b.x < a.x + a.w + gap && a.y < b.y + b.h + gap && b.y < a.y + a.h + gap;
}

/** Whether the segment from a to b passes through the box grown by `gap` (Liang–Barsky clipping). */
function crosses(a: { x: number; y: number }, b: { x: number; y: number }, box: Box, gap = GAP / 2): boolean {
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  let t0 = 0;
  let t1 = 1;
  const edges: Array<[number, number]> = [
    [-dx, a.x - (box.x - gap)], [dx, box.x + box.w + gap - a.x],
    [-dy, a.y - (box.y - gap)], [dy, box.y + box.h + gap - a.y],
  ];
  for (const [p, q] of edges) {
    if (p === 0) {
      if (q < 0) return false;
      continue;
    }
    const t = q / p;
    if (p < 0) t0 = Math.max(t0, t);
    else t1 = Math.min(t1, t);
    if (t0 > t1) return false;
  }
  return true;
}

/** Distance from point p to the segment a–b. */
function segmentDistance(p: { x: number; y: number }, a: { x: number; y: number }, b: { x: number; y: number }): number {
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  const len2 = dx * dx + dy * dy;
  const t = len2 === 0 ? 0 : Math.max(0, Math.min(1, ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2));
  return Math.hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy));
}

function nodeBox(x: number, y: number): Box {
  return { x: x - NODE_RADIUS, y: y - NODE_RADIUS, w: 2 * NODE_RADIUS, h: 2 * NODE_RADIUS };
}

/** A label's size: the widest line by the stacked line heights. */
function measureLabel(lines: LabelLine[], measure: Measure): { w: number; h: number } {
  return {
    w: Math.max(0, ...lines.map((l) => measure(l.text, l.font))),
    h: lines.reduce((h, l) => h + LABEL_FONTS[l.font].size * LINE_HEIGHT, 0),
  };
}

/** The label with its centre at (cx, cy): lines stacked, each centred. */
function placeLabel(lines: LabelLine[], size: { w: number; h: number }, cx: number, cy: number): PlacedLabel {
  const box = { x: cx - size.w / 2, y: cy - size.h / 2, w: size.w, h: size.h };
  let top = box.y;
  const placed = lines.map((l): PlacedLine => {
    const lh = LABEL_FONTS[l.font].size * LINE_HEIGHT;
    // The baseline sits where the glyphs' ascent fills the line's upper part.
    const line = { ...l, x: cx, y: top + lh * 0.5 + LABEL_FONTS[l.font].size * 0.36 };
    top += lh;
    return line;
  });
  return { box, lines: placed };
}

/** How far a box of this size reaches from its centre along the unit direction (ux, uy). */
function reach(size: { w: number; h: number }, ux: number, uy: number): number {
  return (size.w / 2) * Math.abs(ux) + (size.h / 2) * Math.abs(uy);
}

function attempt(input: RingLayoutInput, radius: number, measure: Measure): Omit<RingLayout, 'viewBox'> {
  const n = input.ring.length;
  const cx = 0;
  const cy = 0;
  const obstacles: Box[] = [];
  let clear = true;
  // The links themselves: no label lies across one.
  const segments: Array<[{ x: number; y: number }, { x: number; y: number }]> = [];
  const blocked = (b: Box): boolean => obstacles.some((o) => overlaps(o, b)) || segments.some(([p, q]) => crosses(p, q, b));

  const points = input.ring.map((_, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, n);
    return { ux: Math.cos(angle), uy: Math.sin(angle), x: cx + (n === 1 ? 0 : radius * Math.cos(angle)), y: cy + (n === 1 ? 0 : radius * Math.sin(angle)) };
  });
  for (const p of points) obstacles.push(nodeBox(p.x, p.y));
  for (const e of input.edges) segments.push([points[e.from] as { x: number; y: number }, points[e.to] as { x: number; y: number }]);
  // Node labels outside the circle, along the radius, just clear of the node.
  const ring = input.ring.map((node, i): LayoutNode => {
    const p = points[i] as (typeof points)[number];
    const size = measureLabel(node.lines, measure);
    const ux = n === 1 ? 0 : p.ux;
    const uy = n === 1 ? 1 : p.uy;
    // Clear of the node's bounding square (what a bounding-box check sees), not just its circle,
    // by GAP on some axis: start where they touch along the radius, then step out.
    const own = nodeBox(p.x, p.y);
    let d = reach({ w: 2 * NODE_RADIUS, h: 2 * NODE_RADIUS }, ux, uy) + reach(size, ux, uy);
    let label = placeLabel(node.lines, size, p.x + ux * d, p.y + uy * d);
    while (overlaps(own, label.box)) {
      d += 1;
      label = placeLabel(node.lines, size, p.x + ux * d, p.y + uy * d);
    }
    if (blocked(label.box)) clear = false;
    obstacles.push(label.box);
    return { id: node.id, x: p.x, y: p.y, label };
  });

  // Link labels beside the link's midpoint, along its normal: inside the ring first (outside for a
  // ring of three), else on the other side;
  // only a little further away when something is in the way (else the circle grows), so each label
  // stays next to its own link.
  const edges = input.edges.map((e) => {
    const a = points[e.from] as (typeof points)[number];
    const b = points[e.to] as (typeof points)[number];
    const mx = (a.x + b.x) / 2;
    const my = (a.y + b.y) / 2;
    const len = Math.hypot(b.x - a.x, b.y - a.y) || 1;
    let nx = -(b.y - a.y) / len;
    let ny = (b.x - a.x) / len;
    const inward = (cx - mx) * nx + (cy - my) * ny;
    // Towards the centre; a link through the centre (a ring of two) gets its label on the right.
    if (inward < -1e-6 || (Math.abs(inward) <= 1e-6 && nx < 0)) {
      nx = -nx;
      ny = -ny;
    }
    const lines: LabelLine[] = [{ text: e.label, font: 'edge' }];
    const size = measureLabel(lines, measure);
    const base = GAP + reach(size, nx, ny);
    let label: PlacedLabel | undefined;
    for (let k = 0; k < 3 && label === undefined; k++) {
      // A triangle has room outside its sides (and none for three labels inside).
      for (const side of n <= 3 ? [-1, 1] : [1, -1]) {
        const d = base + k * 6;
        const lx = mx + side * nx * d;
        const ly = my + side * ny * d;
        const candidate = placeLabel(lines, size, lx, ly);
        // Read as this link's label: clearly nearer to it than to any other link.
        const own = segmentDistance({ x: lx, y: ly }, a, b);
        const theirs = input.edges.filter((o) => o !== e).map((o) => segmentDistance({ x: lx, y: ly }, points[o.from] as typeof a, points[o.to] as typeof a));
        if (!blocked(candidate.box) && theirs.every((t) => own < 0.75 * t)) {
          label = candidate;
          break;
        }
      }
    }
    if (label === undefined) {
      clear = false;
      label = placeLabel(lines, size, mx + nx * base, my + ny * base);
    }
    obstacles.push(label.box);
    return { from: e.from, to: e.to, label };
  });

  // Out of the ring: a column to the right of everything drawn so far, labels under the nodes.
  const outNodes = input.out ?? [];
  const right = Math.max(cx + radius, ...obstacles.map((o) => o.x + o.w));
  const sizes = outNodes.map((o) => measureLabel(o.lines, measure));
  const colX = right + 40 + Math.max(NODE_RADIUS, ...sizes.map((s) => s.w / 2));
  let y = cy - radius + NODE_RADIUS;
  const out = outNodes.map((node, i): LayoutNode => {
    const size = sizes[i] as { w: number; h: number };
    const label = placeLabel(node.lines, size, colX, y + NODE_RADIUS + GAP + size.h / 2);
    const placed = { id: node.id, x: colX, y, label };
    obstacles.push(nodeBox(colX, y), label.box);
    y += 2 * NODE_RADIUS + GAP + size.h + 24;
    return placed;
  });
  return { cx, cy, radius, ring, out, edges, clear };
}

/** Lays out the ring, growing the circle until no label touches a node or another label. */
export function layoutRing(input: RingLayoutInput): RingLayout {
  const measure = input.measure ?? estimateWidth;
  const n = input.ring.length;
  // Neighbours at least two node widths apart along the circle.
  const start = n < 2 ? MIN_RADIUS : Math.max(MIN_RADIUS, (2 * NODE_RADIUS + 4 * GAP) / (2 * Math.sin(Math.PI / n)));
  let result = attempt(input, start, measure);
  for (let r = start + RADIUS_STEP; !result.clear && r <= MAX_RADIUS; r += RADIUS_STEP) result = attempt(input, r, measure);
  const guide = n > 1 ? [{ x: result.cx - result.radius - 13, y: result.cy - result.radius - 13, w: 2 * result.radius + 26, h: 2 * result.radius + 26 }] : [];
  const boxes: Box[] = [
    // The ring's guide circle (styles.css: 26 px wide) is drawn whole.
    ...guide,
    ...result.ring.flatMap((nd) => [nodeBox(nd.x, nd.y), nd.label.box]),
    ...result.out.flatMap((nd) => [nodeBox(nd.x, nd.y), nd.label.box]),
    ...result.edges.map((e) => e.label.box),
  ];
  const pad = 12;
  const x0 = Math.min(...boxes.map((b) => b.x)) - pad;
  const y0 = Math.min(...boxes.map((b) => b.y)) - pad;
  const x1 = Math.max(...boxes.map((b) => b.x + b.w)) + pad;
  const y1 = Math.max(...boxes.map((b) => b.y + b.h)) + pad;
  return { ...result, viewBox: { x: x0, y: y0, w: x1 - x0, h: y1 - y0 } };
}

/** Whether any two of the boxes overlap (touching edges do not count). */
export function anyOverlap(boxes: Box[]): [number, number] | null {
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      if (overlaps(boxes[i] as Box, boxes[j] as Box, 0)) return [i, j];
    }
  }
  return null;
}

/**
 * A stage's layers as people count them. The wire's ranges are half-open and 0-based ([1, 3) is
 * the second and third layer); people count from 1 and name both ends, so [0, 1) is "layer 1" and
 * [1, 3) is "layers 2–3 (2 layers)": adjacent stages never seem to share a layer.
 */
export function layerRangeText(start: number, end: number): string {
  const count = end - start;
  if (count <= 0) return 'no layers';
  return count === 1 ? `layer ${start + 1}` : `layers ${start + 1}–${end} (${count} layers)`;
}
