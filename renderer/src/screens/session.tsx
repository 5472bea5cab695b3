// Hosting and joining: start a session over a local GGUF file (or one downloaded from a URL, with
// its progress, speed and a cancel) or join one with a code; as the host, the code large and
// copyable, joiners to approve, the plan (or why there is none) and a banner while the ring
// recovers; as a member, the assigned layers, their loading, the stage's timing and a pause button.
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useId, useState, type FormEvent, type ReactElement } from 'react';
import type { DownloadWire, SessionStatus } from '../../../common/control-api.js';
import { layerRangeText } from '../../../common/ring-layout.js';
import { stageTimeText } from '../../../common/stage-time.js';
import { api } from '../api.js';
import { Card, CopyButton, ErrorBanner, formatBytes, formatMs, Progress } from '../ui.js';
import { formatDuration, RingBanner } from './recovery.js';

function useSessionAction<A extends unknown[]>(fn: (...args: A) => Promise<SessionStatus>) {
  const client = useQueryClient();
  return useMutation({ mutationFn: (args: A) => fn(...args), onSuccess: (s) => client.setQueryData(['status'], s) });
}

export function SessionScreen({ status }: { status: SessionStatus }): ReactElement {
  if (status.role === 'host') return <HostView status={status} />;
  if (status.role === 'member') return <MemberView status={status} />;
  return (
    <div className="stack">
      {/* Why the last session ended or the last attempt failed, until the next one starts. */}
      <ErrorBanner error={status.error} />
      <div className="two-col">
        <HostForm shown={status.error?.message} download={status.download} />
        <JoinForm shown={status.error?.message} />
      </div>
    </div>
  );
}

/** The host form's weight layout choice and draft model, kept for the next session. */
const FAST_LAYOUT_KEY = 'kiwi.weightLayout';
const DRAFT_MODEL_KEY = 'kiwi.draftModel';
/** Disk for standby layers: one setting for this computer, hosting or joining (`--standby-gb`). */
const STANDBY_BUDGET_KEY = 'kiwi.standbyGb';

/** The standby setting's text as GB for a request: empty is none. */
const standbyGbOf = (text: string): number | undefined => (text.trim() === '' ? undefined : Number(text.trim()));

const isUrl = (text: string): boolean => /^https?:\/\//i.test(text.trim());

/** `shown`: the message the status banner already shows, so a failure is not shown twice. */
function HostForm({ shown, download }: { shown: string | undefined; download: DownloadWire | null }): ReactElement {
  const id = useId();
  const [model, setModel] = useState('');
  const [autoApprove, setAutoApprove] = useState(false);
  const [fastLayout, setFastLayout] = useState(() => localStorage.getItem(FAST_LAYOUT_KEY) === 'fast');
  const [draftModel, setDraftModel] = useState(() => localStorage.getItem(DRAFT_MODEL_KEY) ?? '');
  const [standbyGb, setStandbyGb] = useState(() => localStorage.getItem(STANDBY_BUDGET_KEY) ?? '');
  const host = useSessionAction(api.host);
  const cancel = useSessionAction(api.cancelDownload);
  const chooseLayout = (fast: boolean): void => {
    setFastLayout(fast);
    localStorage.setItem(FAST_LAYOUT_KEY, fast ? 'fast' : 'exact');
  };
  const chooseDraft = (path: string): void => {
    setDraftModel(path);
    localStorage.setItem(DRAFT_MODEL_KEY, path);
  };
  const chooseStandby = (gb: string): void => {
    setStandbyGb(gb);
    localStorage.setItem(STANDBY_BUDGET_KEY, gb.trim());
  };
  const options = { autoApprove, fastLayout, draftModel, standbyGb: standbyGbOf(standbyGb) };
  const start = (text: string): void => host.mutate([isUrl(text) ? { url: text.trim() } : { path: text.trim() }, options]);
  const submit = (e: FormEvent): void => {
    e.preventDefault();
    start(model);
  };
  if (download?.state === 'downloading') {
    return (
      <Card title="Host a session">
        <DownloadProgress download={download} />
        <ErrorBanner error={cancel.error as { message: string } | null} />
        <button type="button" className="danger" disabled={cancel.isPending} onClick={() => cancel.mutate([])}>Cancel download</button>
      </Card>
    );
  }
  return (
    <Card title="Host a session">
      <p className="lede">Choose the model: a GGUF file on this computer, or its address to download it. You get a code to read out to your friends; your machine serves the API.</p>
      {download !== null ? (
        <div className="download-stopped" data-testid="download-stopped">
          <DownloadProgress download={download} />
          <button type="button" className="secondary" disabled={host.isPending} onClick={() => start(download.url)}>
            {download.state === 'cancelled' ? 'Resume download' : 'Try the download again'}
          </button>
        </div>
      ) : null}
      <form onSubmit={submit} className="form">
        <label htmlFor={`${id}-model`}>Model: GGUF file or download URL</label>
        <input
          id={`${id}-model`} value={model} onChange={(e) => setModel(e.target.value)} required spellCheck={false}
          placeholder="/home/you/models/llama-3-8b.Q4_K_M.gguf or https://…/model.gguf" aria-describedby={`${id}-model-hint`}
        />
        <span id={`${id}-model-hint`} className="muted small">A URL is downloaded into Kiwi's model cache once (resumable); members then fetch just their layers from it.</span>
        <label className="check">
          <input type="checkbox" checked={autoApprove} onChange={(e) => setAutoApprove(e.target.checked)} />
          Let in everyone who has the code (no approval)
        </label>
        <label className="check">
          <input type="checkbox" checked={fastLayout} onChange={(e) => chooseLayout(e.target.checked)} data-testid="fast-layout" />
          Faster answers from Q4_0 models (their weights regrouped: close to the file&apos;s, not bit for bit)
        </label>
        <label htmlFor={`${id}-draft`}>Draft model (optional)</label>
        <input
          id={`${id}-draft`} value={draftModel} onChange={(e) => chooseDraft(e.target.value)} spellCheck={false} data-testid="draft-model"
          placeholder="/home/you/models/llama-3.2-1b.Q4_0.gguf" aria-describedby={`${id}-draft-hint`}
        />
        <span id={`${id}-draft-hint`} className="muted small">A small GGUF file on this computer with the model&apos;s vocabulary (e.g. Llama-3.2-1B for Llama-3.1-8B): it guesses ahead and the ring checks its guesses in one trip, so answers come faster and stay the model&apos;s own.</span>
        <label htmlFor={`${id}-host-standby`}>Disk for standby layers, in GB (optional: the layers after this computer&apos;s, prepared in the background, make recoveries fast)</label>
        <input id={`${id}-host-standby`} type="number" min={0} step="any" value={standbyGb} onChange={(e) => chooseStandby(e.target.value)} placeholder="none" data-testid="host-standby-budget" />
        <ErrorBanner error={host.error?.message === shown ? null : (host.error as { message: string } | null)} />
        <button type="submit" disabled={host.isPending || model.trim() === ''}>
          {host.isPending ? 'Loading the model…' : isUrl(model) ? 'Download and host' : 'Start hosting'}
        </button>
      </form>
      <div className="builtin-model">
        <p className="muted small">No model yet? Kiwi comes with a tiny one that continues stories (try &ldquo;Once upon a time&rdquo;); it does not chat.</p>
        <button type="button" className="secondary" disabled={host.isPending} onClick={() => host.mutate(['built-in', options])}>
          Host the built-in story model (stories260K)
        </button>
      </div>
    </Card>
  );
}

/** Bytes so far, total, speed and time left of a model download (or where it stopped and why). */
function DownloadProgress({ download: d }: { download: DownloadWire }): ReactElement {
  const fraction = d.total_bytes !== null && d.total_bytes > 0 ? Math.min(1, d.received_bytes / d.total_bytes) : null;
  const left = d.bytes_per_s !== null && d.bytes_per_s > 0 && d.total_bytes !== null ? ((d.total_bytes - d.received_bytes) / d.bytes_per_s) * 1000 : null;
  const heading = { downloading: 'Downloading the model', cancelled: 'Download cancelled', failed: 'Download failed' }[d.state];
  return (
    <div className="download" data-testid="download" data-state={d.state}>
      <p className="download-head"><strong>{heading}</strong> <code>{d.file}</code></p>
      <p className="muted small download-url">{d.url}</p>
      <Progress fraction={fraction} label="Model download progress" />
      <p className="small" data-testid="download-figures">
        {formatBytes(d.received_bytes)}{d.total_bytes !== null ? ` of ${formatBytes(d.total_bytes)}` : ''}
        {fraction !== null ? ` (${Math.floor(fraction * 100)}%)` : ''}
        {d.state === 'downloading' && d.bytes_per_s !== null ? ` · ${formatBytes(d.bytes_per_s)}/s` : ''}
        {d.state === 'downloading' && left !== null ? ` · about ${formatDuration(left)} left` : ''}
        {d.resumed ? ' · resumed from the earlier part' : ''}
      </p>
      {d.state === 'cancelled' ? <p className="muted small">Kiwi keeps what it has downloaded: resuming goes on from there.</p> : null}
      <ErrorBanner error={d.error} />
    </div>
  );
}

const MEMORY_BUDGET_KEY = 'kiwi.memoryBudgetMb';

function JoinForm({ shown }: { shown: string | undefined }): ReactElement {
  const id = useId();
  const [code, setCode] = useState('');
  const [rendezvous, setRendezvous] = useState('');
  const [name, setName] = useState('');
  // Remembered on this computer: how much memory Kiwi may use here is a setting, not a per-session choice.
  const [memoryMb, setMemoryMb] = useState(() => localStorage.getItem(MEMORY_BUDGET_KEY) ?? '');
  const [standbyGb, setStandbyGb] = useState(() => localStorage.getItem(STANDBY_BUDGET_KEY) ?? '');
  const join = useSessionAction(api.join);
  const submit = (e: FormEvent): void => {
    e.preventDefault();
    const budget = memoryMb.trim();
    localStorage.setItem(MEMORY_BUDGET_KEY, budget);
    const standby = standbyGb.trim();
    localStorage.setItem(STANDBY_BUDGET_KEY, standby);
    join.mutate([code.trim(), rendezvous.trim() || undefined, name.trim() || undefined, budget === '' ? undefined : Number(budget), standbyGbOf(standby)]);
  };
  return (
    <Card title="Join a session">
      <p className="lede">Type the code your host reads out, like <code>42-orbit-velvet-kiwi</code>.</p>
      <form onSubmit={submit} className="form">
        <label htmlFor={`${id}-code`}>Session code</label>
        <input id={`${id}-code`} className="code-input" value={code} onChange={(e) => setCode(e.target.value)} placeholder="42-orbit-velvet-kiwi" required autoComplete="off" spellCheck={false} />
        <label htmlFor={`${id}-rv`}>Rendezvous address (optional on the host's network)</label>
        <input id={`${id}-rv`} value={rendezvous} onChange={(e) => setRendezvous(e.target.value)} placeholder="found on this network, or ws://192.168.1.20:7070" spellCheck={false} />
        <label htmlFor={`${id}-name`}>Your name (optional)</label>
        <input id={`${id}-name`} value={name} onChange={(e) => setName(e.target.value)} placeholder="this computer's name" maxLength={64} />
        <label htmlFor={`${id}-mem`}>Memory Kiwi may use here, in MiB (optional; Kiwi's own runtime included)</label>
        <input id={`${id}-mem`} type="number" min={192} step={1} value={memoryMb} onChange={(e) => setMemoryMb(e.target.value)} placeholder="all this computer can give" data-testid="memory-budget" />
        <label htmlFor={`${id}-standby`}>Disk for standby layers, in GB (optional: layers next to yours, fetched in the background, make recoveries fast)</label>
        <input id={`${id}-standby`} type="number" min={0} step="any" value={standbyGb} onChange={(e) => setStandbyGb(e.target.value)} placeholder="none" data-testid="standby-budget" />
        <ErrorBanner error={join.error?.message === shown ? null : (join.error as { message: string } | null)} />
        <button type="submit" disabled={join.isPending || code.trim() === ''}>{join.isPending ? (rendezvous.trim() === '' ? 'Looking for the host…' : 'Joining…') : 'Join'}</button>
      </form>
    </Card>
  );
}

const STATE_WORDS: Record<string, string> = {
  pending: 'waiting for you', active: 'in the ring', 'soft-evicted': 'unreachable', evicted: 'evicted', left: 'left', rejected: 'not admitted',
};

function HostView({ status }: { status: SessionStatus }): ReactElement {
  const decide = useSessionAction(api.decide);
  const leave = useSessionAction(api.leave);
  const code = status.code ?? '';
  const pending = status.members.filter((m) => m.state === 'pending');
  const others = status.members.filter((m) => m.state !== 'pending');
  return (
    <div className="stack">
      <RingBanner ring={status.ring_state} />
      <Card title="Your session" actions={<button type="button" className="danger" onClick={() => leave.mutate([])}>End session</button>}>
        <div className="session-code" aria-label="Session code">
          <span data-testid="session-code">{code}</span>
          <CopyButton text={code} label="Copy the session code" />
        </div>
        <p className="muted small">
          Friends join with this code and the rendezvous <code data-testid="rendezvous">{status.rendezvous}</code>
          {' '}<CopyButton text={status.rendezvous ?? ''} label="Copy the rendezvous address" />
        </p>
        <p className="muted small">Model: <code>{status.model}</code>{status.serving !== null ? <> · serving at <code>{status.serving.url}</code></> : null}</p>
        <ErrorBanner error={status.error ?? ((decide.error ?? leave.error) as { message: string } | null)} />
      </Card>

      {pending.length > 0 ? (
        <Card title="Waiting to join">
          <ul className="members">
            {pending.map((m) => (
              <li key={m.member_id} className="member pending">
                <span className="member-name">{m.name}</span>
                {m.fingerprint != null ? (
                  <span className="fingerprint" data-testid="pending-fingerprint" title="Approve only if their screen shows the same fingerprint">
                    fingerprint <code>{m.fingerprint}</code>
                  </span>
                ) : null}
                <span className="muted small">{m.addresses[0] ?? 'relay only'}</span>
                <span className="actions">
                  <button type="button" onClick={() => decide.mutate([m.member_id, true])} aria-label={`Approve ${m.name}${m.fingerprint != null ? ` (${m.fingerprint})` : ''}`}>Approve</button>
                  <button type="button" className="secondary" onClick={() => decide.mutate([m.member_id, false])} aria-label={`Reject ${m.name}${m.fingerprint != null ? ` (${m.fingerprint})` : ''}`}>Reject</button>
                </span>
              </li>
            ))}
          </ul>
        </Card>
      ) : null}

      <Card title="Members">
        {others.length === 0 ? <p className="muted">Nobody has joined yet. Read the code out to a friend.</p> : (
          <table className="table">
            <thead><tr><th scope="col">Name</th><th scope="col">State</th><th scope="col">Memory</th><th scope="col">Bandwidth</th><th scope="col">Address</th></tr></thead>
            <tbody>
              {others.map((m) => (
                <tr key={m.member_id} className={`state-${m.state}`}>
                  <td>{m.name}</td>
                  <td><span className={`dot ${m.state}${!m.connected && m.state === 'active' ? ' disconnected' : ''}`} aria-hidden="true" />{STATE_WORDS[m.state] ?? m.state}{!m.connected && m.state === 'active' ? ' (reconnecting)' : ''}</td>
                  <td>{formatBytes(m.memory_bytes)}</td>
                  <td>{m.bandwidth_gbps === null ? '—' : `${m.bandwidth_gbps.toFixed(m.bandwidth_gbps < 10 ? 1 : 0)} GB/s`}</td>
                  <td className="muted small">{m.addresses[0] ?? 'relay only'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Card>

      <PlanCard status={status} />
    </div>
  );
}

export function PlanCard({ status }: { status: SessionStatus }): ReactElement {
  const plan = status.plan;
  return (
    <Card title="Plan">
      {status.plan_error !== null ? <ErrorBanner error={status.plan_error} /> : null}
      {plan === null ? (
        status.plan_error === null ? <p className="muted">No plan yet: the ring is planned once members have joined, and the model is served once each has loaded its layers.</p> : null
      ) : (
        <>
          <p>{plan.layers} layers over {plan.stages.length} {plan.stages.length === 1 ? 'stage' : 'stages'}{plan.tokens_per_s !== null ? <> · {plan.measured ? 'measured' : 'predicted'} <strong>{plan.tokens_per_s.toFixed(1)} tokens/s</strong></> : null}</p>
          <table className="table">
            <thead><tr><th scope="col">Member</th><th scope="col">Layers</th><th scope="col">Stage time</th></tr></thead>
            <tbody>
              {plan.stages.map((s) => (
                <tr key={s.peer}><td>{s.name}{s.head ? ' (head)' : ''}</td><td>{layerRangeText(s.start, s.end)}</td><td>{stageTimeText(s) ?? '—'}</td></tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </Card>
  );
}

const PHASE_WORDS: Record<SessionStatus['phase'], string> = {
  idle: 'Not in a session', connecting: 'Connecting…', pending: 'Waiting for the host to let you in', active: 'In the ring',
  reconnecting: 'Connection lost, reconnecting…', paused: 'Paused: not contributing', ended: 'The session ended',
};

function MemberView({ status }: { status: SessionStatus }): ReactElement {
  const pause = useSessionAction(api.pause);
  const leave = useSessionAction(api.leave);
  const a = status.assignment;
  return (
    <div className="stack">
      <Card
        title="You are a member"
        actions={
          <span className="actions">
            <button type="button" className="secondary" disabled={pause.isPending || status.phase === 'ended'} onClick={() => pause.mutate([!status.paused])}>
              {status.paused ? 'Resume contributing' : 'Pause contributing'}
            </button>
            <button type="button" className="danger" onClick={() => leave.mutate([])}>Leave</button>
          </span>
        }
      >
        <p className={`phase phase-${status.phase}`} role="status" data-testid="member-phase">{PHASE_WORDS[status.phase]}</p>
        {status.self_fingerprint != null ? (
          <p className="small" data-testid="self-fingerprint">
            Your fingerprint: <code>{status.self_fingerprint}</code>{status.phase === 'pending' ? ' · read it to the host, who approves you by it' : null}
          </p>
        ) : null}
        <p className="muted small">Session <code>{status.code}</code> via <code>{status.rendezvous}</code>{status.self_peer !== null ? <> · you are peer {status.self_peer}</> : null}</p>
        <ErrorBanner error={status.error ?? ((pause.error ?? leave.error) as { message: string } | null)} />
      </Card>
      <Card title="Your part of the model">
        {a === null ? (
          <p className="muted">{status.phase === 'active' ? 'Waiting for the host to assign your layers.' : 'You get layers once you are in the ring.'}</p>
        ) : (
          <dl className="device-grid">
            <div><dt>Layers</dt><dd><span className="big-figure">{layerRangeText(a.start, a.end)}</span>{a.head ? ' + head' : ''}</dd></div>
            <div><dt>Loading</dt><dd><Progress fraction={a.load_fraction} label="Layer loading progress" /> {Math.round(a.load_fraction * 100)}%</dd></div>
            <div><dt>Your stage</dt><dd>{formatMs(a.stage_ms)} per token</dd></div>
          </dl>
        )}
      </Card>
    </div>
  );
}
