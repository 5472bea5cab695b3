// The topology view: the ring as a live picture. Peers sit on a circle in ring order (the host
// first, at the top); each ring link is drawn with its kind (direct: solid, relayed: dashed) and
// round-trip time; members out of the ring (unreachable or evicted) are drawn in red beside it,
// and the ring closes over the others as soon as the host re-forms it.
import type { ReactElement } from 'react';
import type { LinkWire, SessionStatus } from '../../../common/control-api.js';
import { Card, formatMs } from '../ui.js';

interface Node {
  peer: number;
  name: string;
  detail: string;
  kind: 'host' | 'member' | 'self' | 'out';
  x: number;
  y: number;
}

const W = 640;
const H = 400;
const CX = W / 2;
const CY = 190;
const R = 140;

function linkBetween(links: LinkWire[], a: number, b: number): LinkWire | undefined {
  return links.find((l) => (l.a === a && l.b === b) || (l.a === b && l.b === a));
}

function layout(status: SessionStatus): { ring: Node[]; out: Node[] } {
  const byPeer = new Map(status.members.map((m) => [m.peer, m]));
  const stage = new Map((status.plan?.stages ?? []).map((s) => [s.peer, s]));
  const ringPeers = status.role === 'member'
    ? [0, ...(status.self_peer !== null && status.self_peer !== 0 ? [status.self_peer] : []), ...status.links.map((l) => l.b).filter((p) => p !== 0 && p !== status.self_peer)]
    : status.ring;
  const n = ringPeers.length;
  const ring = ringPeers.map((peer, i): Node => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, n);
    const s = stage.get(peer);
    const isSelf = status.role === 'member' && peer === status.self_peer;
    const name = peer === 0 ? (status.role === 'host' ? 'You (host)' : 'Host') : isSelf ? 'You' : (byPeer.get(peer)?.name ?? `peer ${peer}`);
    const detail = s !== undefined ? `layers ${s.start}–${s.end}${s.head ? ' + head' : ''}${s.stage_ms !== null ? ` · ${formatMs(s.stage_ms)}` : ''}` : peer === 0 ? 'head' : '';
    return { peer, name, detail, kind: peer === 0 ? 'host' : isSelf ? 'self' : 'member', x: CX + R * Math.cos(angle), y: CY + R * Math.sin(angle) };
  });
  const gone = status.members.filter((m) => m.state === 'soft-evicted' || m.state === 'evicted');
  // Out of the ring: a column to the right of the circle, clear of every ring label.
  const out = gone.map((m, i): Node => ({
    peer: m.peer, name: m.name, detail: m.state === 'evicted' ? 'evicted' : 'unreachable', kind: 'out',
    x: CX + R + 150, y: 70 + i * 100,
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
  const summary = `Ring of ${ring.length}: ${ring.map((n) => n.name).join(' → ')}${out.length > 0 ? `; out of the ring: ${out.map((n) => n.name).join(', ')}` : ''}`;
  return (
    <Card title="Ring">
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
          const cls = `edge ${link?.state ?? 'connecting'} ${link?.kind ?? ''}`;
          return (
            <g key={`${from.peer}-${to.peer}`} data-testid={`link-${Math.min(from.peer, to.peer)}-${Math.max(from.peer, to.peer)}`}>
              <line x1={from.x} y1={from.y} x2={to.x} y2={to.y} className={cls} />
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
          <g key={`${n.kind}-${n.peer}`} className={`node ${n.kind}`} transform={`translate(${n.x} ${n.y})`} data-testid={`node-${n.name}`} data-state={n.kind === 'out' ? n.detail : 'ring'}>
            <circle r={26} />
            <text y={5} textAnchor="middle" className="node-initial">{n.name.slice(0, 1).toUpperCase()}</text>
            <text y={44} textAnchor="middle" className="node-name">{n.name}</text>
            {n.detail !== '' ? <text y={60} textAnchor="middle" className="node-detail">{n.detail}</text> : null}
          </g>
        ))}
      </svg>
      <ul className="legend" aria-label="Legend">
        <li><span className="swatch direct" />direct link</li>
        <li><span className="swatch relayed" />relayed through the rendezvous</li>
        <li><span className="swatch out" />out of the ring</li>
      </ul>
      <p className="sr-only">{summary}</p>
    </Card>
  );
}
