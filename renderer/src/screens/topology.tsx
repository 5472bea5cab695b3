// The topology view: the ring as a live picture. Peers sit on a circle in ring order (the host
// first, at the top); each ring link is drawn with its kind (direct: solid, relayed: dashed) and
// round-trip time; while the ring computes tokens (measured steps, not a guess) dots flow along
// its links at a pace set by the measured tokens/s, still under prefers-reduced-motion. Members
// that dropped (unreachable, evicted, disconnected) are red: beside the ring once the host
// re-planned without them, in place until it has. A banner tells of a re-plan in progress, and
// the history of past ones sits below.
import type { CSSProperties, ReactElement } from 'react';
import type { LinkWire, MemberWire, SessionStatus } from '../../../common/control-api.js';
import { Card, formatMs } from '../ui.js';
import { RecoveryHistory, RingBanner } from './recovery.js';

interface Node {
  peer: number;
  name: string;
  detail: string;
  kind: 'host' | 'member' | 'self' | 'out';
  /** Why a member is red: unreachable, evicted, left; null: fine. */
  trouble: 'unreachable' | 'evicted' | 'left' | null;
  x: number;
  y: number;
}

const W = 640;
const H = 400;
const CX = W / 2;
const CY = 190;
const R = 140;
/** One dash period of the flow overlay (px, as in styles.css): the CSS animation moves it by this much per cycle. */
const FLOW_PERIOD = 24;

function linkBetween(links: LinkWire[], a: number, b: number): LinkWire | undefined {
  return links.find((l) => (l.a === a && l.b === b) || (l.a === b && l.b === a));
}

function trouble(m: MemberWire | undefined): Node['trouble'] {
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

function layout(status: SessionStatus): { ring: Node[]; out: Node[] } {
  const byPeer = new Map(status.members.map((m) => [m.peer, m]));
  const stage = new Map((status.plan?.stages ?? []).map((s) => [s.peer, s]));
  const ringPeers = ringOrder(status);
  const n = ringPeers.length;
  const ring = ringPeers.map((peer, i): Node => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, n);
    const s = stage.get(peer);
    const isSelf = status.role === 'member' && peer === status.self_peer;
    const name = peer === 0 ? (status.role === 'host' ? 'You (host)' : 'Host') : isSelf ? 'You' : (byPeer.get(peer)?.name ?? `peer ${peer}`);
    const t = peer === 0 || isSelf ? null : trouble(byPeer.get(peer));
    // A member has no plan of the ring, but knows its own layers.
    const held = s ?? (isSelf && status.assignment !== null ? { ...status.assignment, state: null } : undefined);
    const detail = t !== null
      ? t
      : held !== undefined
        ? `layers ${held.start}–${held.end}${held.head ? ' + head' : ''}${held.stage_ms !== null ? ` · ${formatMs(held.stage_ms)}` : ''}${held.state === 'kept' ? ' · kept' : ''}`
        : peer === 0 ? 'head' : '';
    return { peer, name, detail, kind: peer === 0 ? 'host' : isSelf ? 'self' : 'member', trouble: t, x: CX + R * Math.cos(angle), y: CY + R * Math.sin(angle) };
  });
  const inRing = new Set(ringPeers);
  // Those who left on their own are not trouble: once the ring closed without them they are gone.
  const gone = status.members.filter((m) => !inRing.has(m.peer) && m.peer !== status.self_peer && (trouble(m) === 'unreachable' || trouble(m) === 'evicted'));
  // Out of the ring: a column to the right of the circle, clear of every ring label.
  const out = gone.map((m, i): Node => ({
    peer: m.peer, name: m.name, detail: trouble(m) ?? '', kind: 'out', trouble: trouble(m), x: CX + R + 150, y: 70 + i * 100,
  }));
  return { ring, out };
}

export function TopologyScreen({ status }: { status: SessionStatus }): ReactElement {
  if (status.role === 'none') {
    return <Card title="Ring"><p className="muted">Host or join a session to see its ring.</p></Card>;
  }
  const { ring, out } = layout(status);
  const edges: Array<{ from: Node; to: Node; link: LinkWire | undefined }> = [];
  const seen = new Set<string>();
  for (let i = 0; i < ring.length && ring.length >= 2; i++) {
    const from = ring[i] as Node;
    const to = ring[(i + 1) % ring.length] as Node;
    const key = `${Math.min(from.peer, to.peer)}-${Math.max(from.peer, to.peer)}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const link = linkBetween(status.links, from.peer, to.peer);
    // A member knows only its own links; the rest of the ring is the host's to draw.
    if (link === undefined && status.role === 'member') continue;
    edges.push({ from, to, link });
  }
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
  return (
    <div className="stack">
      <Card title="Ring">
        <RingBanner ring={status.ring_state} />
        <svg className="topology" viewBox={`0 0 ${W} ${H}`} role="img" aria-label={summary} data-testid="topology">
          <circle cx={CX} cy={CY} r={R} className="ring-guide" />
          {edges.map(({ from, to, link }) => {
            const mx = (from.x + to.x) / 2;
            const my = (from.y + to.y) / 2;
            // Labels sit outside the chord, away from the centre, so they do not collide.
            const dx = mx - CX;
            const dy = my - CY;
            const len = Math.hypot(dx, dy) || 1;
            const lx = ring.length === 2 ? mx + 70 : mx + (dx / len) * 28;
            const ly = ring.length === 2 ? my : my + (dy / len) * 28;
            const down = from.trouble !== null || to.trouble !== null;
            const cls = `edge ${down ? 'down' : ''} ${link?.state ?? 'connecting'} ${link?.kind ?? ''}`;
            return (
              <g key={`${from.peer}-${to.peer}`} data-testid={`link-${Math.min(from.peer, to.peer)}-${Math.max(from.peer, to.peer)}`}>
                <line x1={from.x} y1={from.y} x2={to.x} y2={to.y} className={cls} />
                {flowing && !down && link?.state === 'up' ? (
                  <line x1={from.x} y1={from.y} x2={to.x} y2={to.y} className="flow" style={flowStyle} data-testid="flow-dots" aria-hidden="true" />
                ) : null}
                <text x={lx} y={ly} className="edge-label" textAnchor="middle">
                  {link === undefined || link.state !== 'up' ? (link?.state ?? 'connecting') : `${link.kind ?? ''} · ${formatMs(link.rtt_ms)}`}
                </text>
              </g>
            );
          })}
          {out.map((n) => (
            <line key={`out-${n.peer}`} x1={n.x - 26} y1={n.y} x2={CX + R + 14} y2={CY} className="edge evicted" />
          ))}
          {[...ring, ...out].map((n) => (
            <g
              key={`${n.kind}-${n.peer}`}
              className={`node ${n.kind}${n.trouble !== null ? ` trouble ${n.trouble}` : ''}`}
              transform={`translate(${n.x} ${n.y})`}
              data-testid={`node-${n.name}`}
              data-state={n.trouble ?? 'ring'}
            >
              <circle r={26} />
              <text y={5} textAnchor="middle" className="node-initial">{n.name.slice(0, 1).toUpperCase()}</text>
              <text y={44} textAnchor="middle" className="node-name">{n.name}</text>
              {n.detail !== '' ? <text y={60} textAnchor="middle" className="node-detail">{n.detail}</text> : null}
            </g>
          ))}
        </svg>
        <p className={`flow-caption${flowing ? ' active' : ''}`} data-testid="flow" data-active={flowing ? 'true' : 'false'}>{flowText}</p>
        <ul className="legend" aria-label="Legend">
          <li><span className="swatch direct" />direct link</li>
          <li><span className="swatch relayed" />relayed through the rendezvous</li>
          <li><span className="swatch flow" />tokens flowing</li>
          <li><span className="swatch out" />dropped out (unreachable, evicted)</li>
        </ul>
        <p className="sr-only">{summary}</p>
      </Card>
      <RecoveryHistory ring={status.ring_state} />
    </div>
  );
}
