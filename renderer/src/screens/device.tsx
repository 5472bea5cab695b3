// First run: the device card (CPU, GPUs and VRAM, RAM, working execution providers, measured
// bandwidth) with the benchmark's progress while it measures.
import { useMutation, useQuery } from '@tanstack/react-query';
import { useEffect, useRef, type ReactElement } from 'react';
import { api } from '../api.js';
import { Card, ErrorBanner, formatBytes, Progress } from '../ui.js';

export function DeviceScreen(): ReactElement {
  const device = useQuery({ queryKey: ['device'], queryFn: api.device });
  const bench = useMutation({ mutationFn: (refresh: boolean) => api.bench(refresh) });
  const started = useRef(false);
  const card = device.data;
  // First run: measure at once, the user came to see this.
  useEffect(() => {
    if (card?.state === 'idle' && !started.current) {
      started.current = true;
      bench.mutate(false);
    }
  }, [card?.state, bench]);

  const s = card?.summary ?? null;
  return (
    <Card
      title="This device"
      actions={
        <button type="button" className="secondary" disabled={card?.state === 'running'} onClick={() => bench.mutate(true)}>
          Measure again
        </button>
      }
    >
      <p className="lede">What this computer brings to a session. Kiwi measures it once and remembers it until the hardware changes.</p>
      <ErrorBanner error={bench.error as { message: string } | null} />
      <ErrorBanner error={card?.error} />
      {card?.state === 'running' ? (
        <div className="bench-progress" aria-live="polite">
          <Progress fraction={card.fraction} label="Device benchmark progress" />
          <p className="muted">{card.progress ?? 'measuring…'}</p>
        </div>
      ) : null}
      {s !== null ? (
        <dl className="device-grid">
          <div><dt>Computer</dt><dd>{s.hostname}<span className="muted"> · {s.platform}</span></dd></div>
          <div><dt>CPU</dt><dd>{s.cpu}<span className="muted"> · {s.cores} threads</span></dd></div>
          <div><dt>Memory</dt><dd>{formatBytes(s.memory_total_bytes)}<span className="muted"> · {formatBytes(s.memory_available_bytes)} free</span></dd></div>
          <div>
            <dt>GPU</dt>
            <dd>
              {s.gpus.length === 0 ? 'none found' : s.gpus.map((g) => (
                <span key={g.name} className="gpu">{g.name}<span className="muted"> · {formatBytes(g.vram_total_bytes)} VRAM</span></span>
              ))}
            </dd>
          </div>
          <div><dt>Runs on</dt><dd>{s.providers.map((p) => <span key={p} className="pill">{p.toUpperCase()}</span>)}</dd></div>
          <div>
            <dt>Memory bandwidth</dt>
            <dd>
              <span className="big-figure">{s.host_bandwidth_gbps.toFixed(1)}</span> GB/s
              {s.provider_bandwidth.map((p) => <span key={p.provider} className="muted"> · {p.provider.toUpperCase()} {p.gbps.toFixed(0)} GB/s</span>)}
            </dd>
          </div>
          <div className="wide muted small">Measured {new Date(s.measured_at).toLocaleString()}{s.cached ? ' (remembered)' : ''}</div>
        </dl>
      ) : card?.state !== 'running' && card?.state !== 'failed' ? (
        <p className="muted">Not measured yet.</p>
      ) : null}
    </Card>
  );
}
