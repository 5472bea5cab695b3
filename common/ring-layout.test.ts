import { describe, expect, it } from 'vitest';
import { anyOverlap, estimateWidth, layerRangeText, layoutRing, NODE_RADIUS, type Box, type RingLayout, type RingLayoutInput } from './ring-layout.js';

/** A ring of `peers` (the host first) over a 16-layer model, with labels as the ring view writes them. */
function ringOf(peers: number, out = 0): RingLayoutInput {
  const names = ['You (host)', 'alice', 'bob-the-workstation', 'carol', 'dave', 'erin-laptop', 'frank', 'grace', 'heidi'];
  const per = Math.floor(16 / peers);
  const ring = Array.from({ length: peers }, (_, i) => {
    const start = i * per;
    const end = i === peers - 1 ? 16 : start + per;
    return {
      id: String(i),
      lines: [
        { text: names[i] as string, font: 'name' as const },
        { text: `${layerRangeText(start, end)}${i === 0 ? ' + head' : ''}`, font: 'detail' as const },
        { text: '12.34 ms · kept', font: 'detail' as const },
      ],
    };
  });
  const edges = peers < 2 ? [] : Array.from({ length: peers === 2 ? 1 : peers }, (_, i) => ({ from: i, to: (i + 1) % peers, label: i % 2 === 0 ? 'direct · 2.33 ms' : 'relayed · 112.50 ms' }));
  return {
    ring,
    edges,
    out: Array.from({ length: out }, (_, i) => ({ id: `out-${i}`, lines: [{ text: `gone-${i}`, font: 'name' as const }, { text: 'unreachable', font: 'detail' as const }] })),
  };
}

function allBoxes(l: RingLayout): Box[] {
  const node = (x: number, y: number): Box => ({ x: x - NODE_RADIUS, y: y - NODE_RADIUS, w: 2 * NODE_RADIUS, h: 2 * NODE_RADIUS });
  return [
    ...l.ring.flatMap((n) => [node(n.x, n.y), n.label.box]),
    ...l.out.flatMap((n) => [node(n.x, n.y), n.label.box]),
    ...l.edges.map((e) => e.label.box),
  ];
}

describe('layoutRing', () => {
  // Fonts differ between machines: text narrower and wider than the estimate.
  for (const peers of [2, 3, 4, 5, 6, 7, 8, 9]) for (const scale of [0.75, 1, 1.3]) {
    it(`keeps every label clear of the nodes and of each other for a ring of ${peers} (text ${scale} x the estimate)`, () => {
      const layout = layoutRing({ ...ringOf(peers, peers > 3 ? 2 : 0), measure: (t, f) => scale * estimateWidth(t, f) });
      expect(layout.clear).toBe(true);
      expect(anyOverlap(allBoxes(layout))).toBeNull();
      // Everything is inside the view box.
      const v = layout.viewBox;
      for (const b of allBoxes(layout)) {
        expect(b.x).toBeGreaterThanOrEqual(v.x);
        expect(b.y).toBeGreaterThanOrEqual(v.y);
        expect(b.x + b.w).toBeLessThanOrEqual(v.x + v.w);
        expect(b.y + b.h).toBeLessThanOrEqual(v.y + v.h);
      }
      // Each link's label is next to its own link: nearer to it than to any other.
      const pos = (i: number): { x: number; y: number } => layout.ring[i] as { x: number; y: number };
      const dist = (p: { x: number; y: number }, a: { x: number; y: number }, b: { x: number; y: number }): number => {
        const dx = b.x - a.x;
        const dy = b.y - a.y;
        const t = Math.max(0, Math.min(1, ((p.x - a.x) * dx + (p.y - a.y) * dy) / (dx * dx + dy * dy)));
        return Math.hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy));
      };
      for (const e of layout.edges) {
        const c = { x: e.label.box.x + e.label.box.w / 2, y: e.label.box.y + e.label.box.h / 2 };
        const own = dist(c, pos(e.from), pos(e.to));
        for (const o of layout.edges) if (o !== e) expect(own).toBeLessThan(dist(c, pos(o.from), pos(o.to)));
      }
      // Node labels sit outside the circle, on their node's side of it.
      for (const n of layout.ring) {
        const cx = n.label.box.x + n.label.box.w / 2;
        const cy = n.label.box.y + n.label.box.h / 2;
        expect(Math.hypot(cx - layout.cx, cy - layout.cy)).toBeGreaterThan(layout.radius);
      }
    });
  }

  it('grows the circle when the labels are long, rather than letting them collide', () => {
    const short = layoutRing(ringOf(8));
    const long = ringOf(8);
    for (const n of long.ring) (n.lines[0] as { text: string }).text = `${(n.lines[0] as { text: string }).text}-with-a-very-long-machine-name`;
    const grown = layoutRing(long);
    expect(grown.clear).toBe(true);
    expect(grown.radius).toBeGreaterThan(short.radius);
    expect(anyOverlap(allBoxes(grown))).toBeNull();
  });

  it('puts the lines of a label under each other, centred, inside its box', () => {
    const layout = layoutRing(ringOf(3));
    for (const n of layout.ring) {
      const ys = n.label.lines.map((l) => l.y);
      for (let i = 1; i < ys.length; i++) expect(ys[i]).toBeGreaterThan(ys[i - 1] as number);
      for (const l of n.label.lines) {
        expect(l.x).toBeCloseTo(n.label.box.x + n.label.box.w / 2, 6);
        expect(estimateWidth(l.text, l.font)).toBeLessThanOrEqual(n.label.box.w + 1e-9);
        expect(l.y).toBeGreaterThan(n.label.box.y);
        expect(l.y).toBeLessThan(n.label.box.y + n.label.box.h);
      }
    }
  });
});

describe('layerRangeText', () => {
  it('counts layers from 1, both ends included, with the count', () => {
    expect(layerRangeText(0, 1)).toBe('layer 1');
    expect(layerRangeText(1, 3)).toBe('layers 2–3 (2 layers)');
    expect(layerRangeText(0, 16)).toBe('layers 1–16 (16 layers)');
    expect(layerRangeText(4, 4)).toBe('no layers');
  });
});
