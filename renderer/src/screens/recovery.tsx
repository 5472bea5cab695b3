// Recovery as it happens: a banner while the host re-plans the ring after a member dropped (or
// waits for one to return because the others cannot hold the model), with the reason and a
// running clock, and the history of past re-plans (how long each took, the bytes it moved).
import { useEffect, useState, type ReactElement } from 'react';
import type { RingStateWire } from '../../../common/control-api.js';
import { Card, formatBytes, formatMs } from '../ui.js';

/** The current time, re-read every second while `ticking` (countdowns and elapsed clocks). */
export function useNow(ticking: boolean): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!ticking) return;
    setNow(Date.now());
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [ticking]);
  return now;
}

/** 95 s → "1:35"; under a minute "42 s". */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

export function RingBanner({ ring }: { ring: RingStateWire | null }): ReactElement | null {
  const active = ring !== null && (ring.phase === 'recovering' || ring.phase === 'waiting');
  const now = useNow(active);
  if (ring === null || !active) return null;
  if (ring.phase === 'recovering') {
    const since = ring.recovery?.started_at;
    return (
      <div className="banner warn" role="status" data-testid="ring-banner" data-phase="recovering">
        <span>
          <strong>Re-forming the ring</strong>
          {ring.recovery !== null ? <>: {ring.recovery.reason}</> : null}. Requests in flight are recomputed and go on.
        </span>
        {since !== undefined ? <span className="small banner-clock" aria-label="Time since the re-plan started">{formatDuration(now - since)}</span> : null}
      </div>
    );
  }
  const until = ring.waiting_until;
  return (
    <div className="banner warn" role="status" data-testid="ring-banner" data-phase="waiting">
      <span>
        <strong>Waiting for a member to return</strong>: the members left cannot hold the model together.
        {until !== null ? <> Requests wait until {new Date(until).toLocaleTimeString()}.</> : ' Requests wait.'}
      </span>
      {until !== null ? <span className="small banner-clock" aria-label="Time left to wait">{formatDuration(until - now)} left</span> : null}
    </div>
  );
}

export function RecoveryHistory({ ring }: { ring: RingStateWire | null }): ReactElement | null {
  if (ring === null || ring.recoveries.length === 0) return null;
  return (
    <Card title="Recoveries">
      <p className="muted small">Ring generation {ring.epoch}: each time a member dropped or came back, the host re-planned the ring.</p>
      <table className="table" data-testid="recoveries">
        <thead>
          <tr><th scope="col">Generation</th><th scope="col">When</th><th scope="col">Why</th><th scope="col">Took</th><th scope="col">Bytes moved</th><th scope="col">Requests resumed</th></tr>
        </thead>
        <tbody>
          {[...ring.recoveries].reverse().map((r) => (
            <tr key={r.epoch}>
              <td>{r.epoch}</td>
              <td>{new Date(r.started_at).toLocaleTimeString()}</td>
              <td>{r.reason}</td>
              <td>{formatMs(r.duration_ms)}</td>
              <td>{formatBytes(r.bytes_moved)}</td>
              <td>{r.resumed_requests}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </Card>
  );
}
