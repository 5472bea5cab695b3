// The topology view: the ring as a live picture. Peers sit on a circle in ring order (the host
// first, at the top); each ring link is drawn with its kind (direct: solid, relayed: dashed) and
// round-trip time; while the ring computes tokens (measured steps, not a guess) dots flow along
// its links at a pace set by the measured tokens/s, still under prefers-reduced-motion. Members
// that dropped (unreachable, evicted, disconnected) are red: beside the ring once the host
// re-planned without them, in place until it has. A banner tells of a re-plan in progress, and
// the history of past ones sits below. Where everything goes (labels clear of each other and of
// the nodes, for any ring size) is common/ring-layout.ts; layer ranges read as people count them,
// from 1 with both ends included ("layers 2–3 (2 layers)"), see layerRangeText there. A member's
// NAT class (mapping, filtering, router port mapping) is its node's tooltip and data attributes.
// A stage's time shows measured beside the plan's prediction (common/stage-time.ts).
import type { CSSProperties, ReactElement } from 'react';
import type { LinkWire, MemberNatClassWire, MemberWire, SessionStatus } from '../../../common/control-api.js';
import { natClassText } from '../../../common/nat-text.js';
import { stageTimeText } from '../../../common/stage-time.js';
import { estimateWidth, LABEL_FONTS, layerRangeText, layoutRing, NODE_RADIUS, type LabelFont, type LabelLine, type Measure, type PlacedLabel } from '../../../common/ring-layout.js';
import { Card, formatMs } from '../ui.js';
import { RecoveryHistory, RingBanner } from './recovery.js';
import { edgeBetween, edgeDetail } from './topology-edge.js';

interface Peer {
  peer: number;
  name: string;
  lines: LabelLine[];
  kind: 'host' | 'member' | 'self' | 'out';
  /** Why a member is red: unreachable, evicted, left; null: fine. */
  trouble: 'unreachable' | 'evicted' | 'left' | null;
  /** What the peer measured of its NAT; null: not reported (the host's own shows on the host's screen: status.host_nat). */
  nat: MemberNatClassWire | null;
}

interface Node extends Peer {
  x: number;
  y: number;
  label: PlacedLabel;
}

/** One dash period of the flow overlay (px, as in styles.css): the CSS animation moves it by this much per cycle. */
const FLOW_PERIOD = 24;
const LABEL_CLASS: Record<LabelFont, string> = { name: 'node-name', detail: 'node-detail', edge: 'edge-label' };

function linkBetween(links: LinkWire[], a: number, b: number): LinkWire | undefined {
  return links.find((l) => (l.a === a && l.b === b) || (l.a === b && l.b === a));
}

function trouble(m: MemberWire | undefined): Peer['trouble'] {
  if (m === undefined) return null;
  if (m.state === 'evicted') return 'evicted';
  if (m.state === 'left') return 'left';
  if (m.state === 'soft-evicted' || !m.connected) return 'unreachable';
  return null;
}

function ringOrder(status: SessionStatus): number[] {
  if (status.role !== 'member') return status.ring;
  // A member knows its own links and, from the host's roster, who else is in the ring.
  const self = status.self_peer;
  const out = new Set(status.members.filter((m) => !m.in_ring).map((m) => m.peer));
  const linked = status.links.map((l) => l.b).filter((p) => !out.has(p));
  const inRing = status.members.filter((m) => m.in_ring).map((m) => m.peer);
  const order = [0, ...(self !== null && self !== 0 ? [self] : []), ...linked, ...inRing];
  return order.filter((p, i) => order.indexOf(p) === i);
}

/** Text widths with the font the SVG uses (the page's), measured once per text; an estimate without a canvas. */
function canvasMeasure(): Measure {
  const ctx = typeof document === 'undefined' ? null : document.createElement('canvas').getContext('2d');
  if (ctx === null) return estimateWidth;
  const family = getComputedStyle(document.body).fontFamily || 'sans-serif';
  const cache = new Map<string, number>();
  return (text, font) => {
    const key = `${font}|${text}`;
    let w = cache.get(key);
    if (w === undefined) {
      const f = LABEL_FONTS[font];
      ctx.font = `${f.weight} ${f.size}px ${family}`;
      w = ctx.measureText(text).width;
      cache.set(key, w);
    }
    return w;
  };
}

let measureText: Measure | undefined;

function peers(status: SessionStatus): { ring: Peer[]; out: Peer[] } {
  const byPeer = new Map(status.members.map((m) => [m.peer, m]));
  const stage = new Map((status.plan?.stages ?? []).map((s) => [s.peer, s]));
  const ring = ringOrder(status).map((peer): Peer => {
    const s = stage.get(peer);
    const isSelf = status.role === 'member' && peer === status.self_peer;
    const name = peer === 0 ? (status.role === 'host' ? 'You (host)' : 'Host') : isSelf ? 'You' : (byPeer.get(peer)?.name ?? `peer ${peer}`);
    const t = peer === 0 || isSelf ? null : trouble(byPeer.get(peer));
    // A member has no plan of the ring, but knows its own layers.
    const held = s ?? (isSelf && status.assignment !== null ? { ...status.assignment, state: null } : undefined);
    const lines: LabelLine[] = [{ text: name, font: 'name' }];
    if (t !== null) lines.push({ text: t, font: 'detail' });
    else if (held !== undefined) {
      lines.push({ text: `${layerRangeText(held.start, held.end)}${held.head ? ' + head' : ''}`, font: 'detail' });
      // Measured beside the plan's prediction (a member's own assignment has one figure).
      const time = 'measured_ms' in held ? stageTimeText(held) : held.stage_ms !== null ? formatMs(held.stage_ms) : null;
      const extra = [time, held.state === 'kept' ? 'kept' : null].filter((x) => x !== null);
      if (extra.length > 0) lines.push({ text: extra.join(' · '), font: 'detail' });
    } else if (peer === 0) lines.push({ text: 'head', font: 'detail' });
    return { peer, name, lines, kind: peer === 0 ? 'host' : isSelf ? 'self' : 'member', trouble: t, nat: (peer === 0 && status.role === 'host' ? status.host_nat : byPeer.get(peer)?.nat) ?? null };
  });
  const inRing = new Set(ring.map((p) => p.peer));
  // Those who left on their own are not trouble: once the ring closed without them they are gone.
  const gone = status.members.filter((m) => !inRing.has(m.peer) && m.peer !== status.self_peer && (trouble(m) === 'unreachable' || trouble(m) === 'evicted'));
  const out = gone.map((m): Peer => ({
    peer: m.peer, name: m.name, lines: [{ text: m.name, font: 'name' }, { text: trouble(m) ?? '', font: 'detail' }], kind: 'out', trouble: trouble(m), nat: m.nat ?? null,
  }));
  return { ring, out };
}

function edgeText(link: LinkWire | undefined): string {
  return link === undefined || link.state !== 'up' ? (link?.state ?? 'connecting') : `${link.kind ?? ''} · ${formatMs(link.rtt_ms)}`;
}

function LabelText({ label, dx = 0, dy = 0 }: { label: PlacedLabel; dx?: number; dy?: number }): ReactElement {
  return (
    <>
      {label.lines.map((l, i) => (
        <text key={i} x={l.x - dx} y={l.y - dy} textAnchor="middle" className={LABEL_CLASS[l.font]}>{l.text}</text>
      ))}
    </>
  );
}

export function TopologyScreen({ status }: { status: SessionStatus }): ReactElement {
  if (status.role === 'none') {
    return <Card title="Ring"><p className="muted">Host or join a session to see its ring.</p></Card>;
  }
  const found = peers(status);
  // The ring's links: each neighbour pair once (a ring of two has one link).
  const pairs: Array<{ from: number; to: number; link: LinkWire | undefined }> = [];
  const seen = new Set<string>();
  for (let i = 0; i < found.ring.length && found.ring.length >= 2; i++) {
    const j = (i + 1) % found.ring.length;
    const a = (found.ring[i] as Peer).peer;
    const b = (found.ring[j] as Peer).peer;
    const key = `${Math.min(a, b)}-${Math.max(a, b)}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const link = linkBetween(status.links, a, b);
    // A member knows only its own links; the rest of the ring is the host's to draw.
    if (link === undefined && status.role === 'member') continue;
    pairs.push({ from: i, to: j, link });
  }
  measureText ??= canvasMeasure();
  const placed = layoutRing({
    ring: found.ring.map((p) => ({ id: String(p.peer), lines: p.lines })),
    out: found.out.map((p) => ({ id: String(p.peer), lines: p.lines })),
    edges: pairs.map((e) => ({ from: e.from, to: e.to, label: edgeText(e.link) })),
    measure: measureText,
  });
  const ring: Node[] = found.ring.map((p, i) => ({ ...p, ...(placed.ring[i] as { x: number; y: number; label: PlacedLabel }) }));
  const out: Node[] = found.out.map((p, i) => ({ ...p, ...(placed.out[i] as { x: number; y: number; label: PlacedLabel }) }));
  const edges = pairs.map((e, i) => ({ from: ring[e.from] as Node, to: ring[e.to] as Node, link: e.link, label: (placed.edges[i] as { label: PlacedLabel }).label }));
  const flow = status.flow;
  const flowing = flow?.active === true && edges.length > 0;
  // One token goes once around the ring per step: the dots move at the ring's length times the
  // measured tokens/s, kept within what the eye can follow.
  const ringLength = edges.reduce((a, { from, to }) => a + Math.hypot(to.x - from.x, to.y - from.y), 0);
  const pxPerS = Math.min(600, Math.max(40, ringLength * (flow?.tokens_per_s ?? 1)));
  const flowStyle: CSSProperties = { animationDuration: `${(FLOW_PERIOD / pxPerS).toFixed(3)}s` };
  const summary = `Ring of ${ring.length}: ${ring.map((n) => n.name + (n.trouble !== null ? ` (${n.trouble})` : '')).join(' → ')}${out.length > 0 ? `; out of the ring: ${out.map((n) => n.name).join(', ')}` : ''}`;
  const flowText = flowing
    ? `Tokens flowing${flow?.tokens_per_s !== null && flow?.tokens_per_s !== undefined ? ` · ${flow.tokens_per_s.toFixed(1)} tokens/s` : ''}`
    : 'No tokens flowing right now';
  const v = placed.viewBox;
  return (
    <div className="stack">
      <Card title="Ring">
        <RingBanner ring={status.ring_state} />
        <svg className="topology" viewBox={`${v.x.toFixed(1)} ${v.y.toFixed(1)} ${v.w.toFixed(1)} ${v.h.toFixed(1)}`} role="img" aria-label={summary} data-testid="topology">
          <circle cx={placed.cx} cy={placed.cy} r={placed.radius} className="ring-guide" />
          {edges.map(({ from, to, link, label }) => {
            const down = from.trouble !== null || to.trouble !== null;
            // What the link runs over and what the planner predicted: the tooltip, and a mark where they differ.
            const detail = edgeDetail(link, edgeBetween(status.plan?.edges, from.peer, to.peer));
            const cls = `edge ${down ? 'down' : ''} ${link?.state ?? 'connecting'} ${link?.kind ?? ''}${detail.mismatch ? ' mismatch' : ''}`;
            return (
              <g
                key={`${from.peer}-${to.peer}`}
                data-testid={`link-${Math.min(from.peer, to.peer)}-${Math.max(from.peer, to.peer)}`}
                {...(detail.actual !== null ? { 'data-actual': detail.actual } : {})}
                {...(detail.predicted !== null ? { 'data-predicted': detail.predicted } : {})}
                data-matched={detail.mismatch ? 'false' : detail.actual !== null && detail.predicted !== null ? 'true' : 'unknown'}
              >
                {detail.title !== null ? <title>{detail.title}</title> : null}
                <line x1={from.x} y1={from.y} x2={to.x} y2={to.y} className={cls} />
                {flowing && !down && link?.state === 'up' ? (
                  <line x1={from.x} y1={from.y} x2={to.x} y2={to.y} className="flow" style={flowStyle} data-testid="flow-dots" aria-hidden="true" />
                ) : null}
                <LabelText label={label} />
              </g>
            );
          })}
          {out.map((n) => (
            <line key={`out-${n.peer}`} x1={n.x - NODE_RADIUS} y1={n.y} x2={placed.cx + placed.radius + NODE_RADIUS} y2={placed.cy} className="edge evicted" />
          ))}
          {[...ring, ...out].map((n) => (
            <g
              key={`${n.kind}-${n.peer}`}
              className={`node ${n.kind}${n.trouble !== null ? ` trouble ${n.trouble}` : ''}`}
              transform={`translate(${n.x} ${n.y})`}
              data-testid={`node-${n.name}`}
              data-state={n.trouble ?? 'ring'}
              {...(n.nat !== null ? { 'data-nat-mapping': n.nat.mapping ?? 'unknown', 'data-port-mapping': n.nat.port_mapping ?? 'none' } : {})}
            >
              {n.nat !== null ? <title>{`${n.name} · NAT: ${natClassText(n.nat)}`}</title> : null}
              <circle r={NODE_RADIUS} />
              <text y={5} textAnchor="middle" className="node-initial">{n.name.slice(0, 1).toUpperCase()}</text>
              <LabelText label={n.label} dx={n.x} dy={n.y} />
            </g>
          ))}
        </svg>
        <p className={`flow-caption${flowing ? ' active' : ''}`} data-testid="flow" data-active={flowing ? 'true' : 'false'}>{flowText}</p>
        <ul className="legend" aria-label="Legend">
          <li><span className="swatch direct" />direct link</li>
          <li><span className="swatch relayed" />relayed through the rendezvous</li>
          {edges.some((e) => e.link !== undefined && edgeDetail(e.link, edgeBetween(status.plan?.edges, e.from.peer, e.to.peer)).mismatch) ? (
            <li><span className="swatch mismatch" />not the kind the planner predicted (hover a link)</li>
          ) : null}
          <li><span className="swatch flow" />tokens flowing</li>
          <li><span className="swatch out" />dropped out (unreachable, evicted)</li>
        </ul>
        <p className="sr-only">{summary}</p>
      </Card>
      <RecoveryHistory ring={status.ring_state} />
    </div>
  );
}
