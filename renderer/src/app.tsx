// The app shell: a header with the session state, tabs for the screens (device, session, ring,
// chat), all fed by the control API's status and device queries kept live over SSE.
import { useQuery } from '@tanstack/react-query';
import { useEffect, useState, type KeyboardEvent, type ReactElement } from 'react';
import type { SessionStatus } from '../../common/control-api.js';
import { api, useControlEvents } from './api.js';
import { ChatScreen } from './screens/chat.js';
import { DeviceScreen } from './screens/device.js';
import { SessionScreen } from './screens/session.js';
import { TopologyScreen } from './screens/topology.js';
import { ErrorBanner } from './ui.js';

const TABS = [
  { id: 'device', label: 'This device' },
  { id: 'session', label: 'Session' },
  { id: 'ring', label: 'Ring' },
  { id: 'chat', label: 'Chat' },
] as const;
type TabId = (typeof TABS)[number]['id'];

const MEMBER_HEADLINES: Record<SessionStatus['phase'], string> = {
  idle: 'Not in a session', connecting: 'Connecting…', pending: 'Waiting for approval', active: 'In a session',
  reconnecting: 'Reconnecting…', paused: 'Paused', ended: 'Session ended',
};

function headline(s: SessionStatus | undefined): { text: string; tone: string } {
  if (s === undefined) return { text: 'Connecting to Kiwi…', tone: 'idle' };
  if (s.role === 'host') {
    const active = s.members.filter((m) => m.state === 'active' && m.connected).length;
    const phase = s.ring_state?.phase;
    const doing = phase === 'recovering' ? ' · recovering' : phase === 'waiting' ? ' · waiting for a member' : s.serving !== null ? ' · serving' : '';
    return { text: `Hosting · ${active} member${active === 1 ? '' : 's'}${doing}`, tone: phase === 'recovering' || phase === 'waiting' ? 'warn' : 'serving' };
  }
  if (s.role === 'none' && s.download?.state === 'downloading') return { text: 'Downloading the model…', tone: 'session' };
  if (s.role === 'member') return { text: MEMBER_HEADLINES[s.phase], tone: s.phase === 'ended' ? 'error' : 'session' };
  return { text: 'Not in a session', tone: 'idle' };
}

export function App(): ReactElement {
  const { connected } = useControlEvents();
  const status = useQuery({ queryKey: ['status'], queryFn: api.status });
  const device = useQuery({ queryKey: ['device'], queryFn: api.device });
  const [chosen, setChosen] = useState<TabId | null>(null);
  // First run lands on the device card (and stays there when the benchmark ends); afterwards on the session.
  const firstRun = device.data !== undefined && device.data.state !== 'done' && status.data?.role === 'none';
  const tab: TabId = chosen ?? (firstRun ? 'device' : 'session');
  useEffect(() => {
    if (chosen === null && device.data !== undefined && status.data !== undefined) setChosen(firstRun ? 'device' : 'session');
  }, [chosen, device.data, status.data, firstRun]);
  const h = headline(status.data);

  // Arrow keys move between tabs (WAI-ARIA tabs pattern); Tab moves into the panel.
  const onTabKey = (e: KeyboardEvent<HTMLButtonElement>): void => {
    const i = TABS.findIndex((t) => t.id === tab);
    const delta = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
    if (delta === 0) return;
    e.preventDefault();
    const next = TABS[(i + delta + TABS.length) % TABS.length];
    if (next !== undefined) {
      setChosen(next.id);
      document.getElementById(`tab-${next.id}`)?.focus();
    }
  };

  return (
    <div className="app">
      <header className="topbar">
        <div className="brand"><img src="./kiwi.svg" alt="" width={28} height={28} /> Kiwi</div>
        <div className={`state-chip ${h.tone}`} role="status" data-testid="headline">{h.text}</div>
        {!connected ? <div className="state-chip error" title="The live event stream is reconnecting">offline</div> : null}
      </header>
      <nav className="tabs" role="tablist" aria-label="Screens">
        {TABS.map((t) => (
          <button
            key={t.id}
            id={`tab-${t.id}`}
            role="tab"
            type="button"
            aria-selected={tab === t.id}
            aria-controls={`panel-${t.id}`}
            tabIndex={tab === t.id ? 0 : -1}
            onClick={() => setChosen(t.id)}
            onKeyDown={onTabKey}
          >
            {t.label}
            {t.id === 'session' && (status.data?.members.some((m) => m.state === 'pending') ?? false) ? <span className="badge" aria-label="someone is waiting">•</span> : null}
          </button>
        ))}
      </nav>
      <main id={`panel-${tab}`} role="tabpanel" aria-labelledby={`tab-${tab}`} className="panel">
        <ErrorBanner error={status.error as { message: string } | null} />
        {tab === 'device' ? <DeviceScreen /> : null}
        {status.data !== undefined && tab === 'session' ? <SessionScreen status={status.data} /> : null}
        {status.data !== undefined && tab === 'ring' ? <TopologyScreen status={status.data} /> : null}
        {status.data !== undefined && tab === 'chat' ? <ChatScreen status={status.data} /> : null}
      </main>
    </div>
  );
}
