// The chat playground: a conversation streamed from this machine's /v1 (through the control API),
// and a snippet for pointing other tools at the same OpenAI-compatible API.
import { useId, useRef, useState, type KeyboardEvent, type ReactElement } from 'react';
import type { SessionStatus } from '../../../common/control-api.js';
import { api } from '../api.js';
import { Card, CopyButton, ErrorBanner } from '../ui.js';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
}

export function ChatScreen({ status }: { status: SessionStatus }): ReactElement {
  const id = useId();
  const [turns, setTurns] = useState<Turn[]>([]);
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<{ message: string } | null>(null);
  const [streaming, setStreaming] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const serving = status.serving;

  const send = async (e?: { preventDefault(): void }): Promise<void> => {
    e?.preventDefault();
    const text = draft.trim();
    if (text === '' || streaming) return;
    const history: Turn[] = [...turns, { role: 'user', content: text }];
    setTurns([...history, { role: 'assistant', content: '' }]);
    setDraft('');
    setError(null);
    setStreaming(true);
    const controller = new AbortController();
    abort.current = controller;
    try {
      let answer = '';
      for await (const piece of api.chat(history, controller.signal)) {
        answer += piece;
        setTurns([...history, { role: 'assistant', content: answer }]);
      }
    } catch (err) {
      if (!controller.signal.aborted) setError(err as Error);
    } finally {
      setStreaming(false);
      abort.current = null;
    }
  };
  const onKey = (e: KeyboardEvent<HTMLTextAreaElement>): void => {
    // Enter sends, Shift+Enter makes a new line (as in most chat apps).
    if (e.key === 'Enter' && !e.shiftKey) void send(e);
  };

  const base = serving?.url ?? 'http://localhost:8080/v1';
  const snippet = `curl ${base}/chat/completions \\\n  -H 'content-type: application/json' \\\n  -d '{"model":"${serving?.model ?? 'kiwi'}","messages":[{"role":"user","content":"Hello!"}],"stream":true}'\n\n# or any OpenAI client:\n# OPENAI_BASE_URL=${base} OPENAI_API_KEY=unused`;

  return (
    <div className="stack">
      <Card title="Chat">
        {serving === null ? (
          <p className="muted">Host a session to chat with its model.</p>
        ) : (
          <>
            <p className="muted small">Talking to <code>{serving.model}</code> at <code>{serving.url}</code></p>
            <ol className="chat-log" aria-live="polite" data-testid="chat-log">
              {turns.map((t, i) => (
                <li key={i} className={`bubble ${t.role}`}>
                  <span className="sr-only">{t.role === 'user' ? 'You' : 'Model'}: </span>
                  {t.content === '' && streaming ? <span className="typing">…</span> : t.content}
                </li>
              ))}
            </ol>
            <ErrorBanner error={error} />
            <form className="chat-form" onSubmit={(e) => void send(e)}>
              <label htmlFor={`${id}-msg`} className="sr-only">Message</label>
              <textarea id={`${id}-msg`} value={draft} onChange={(e) => setDraft(e.target.value)} onKeyDown={onKey} rows={2} placeholder="Say something to the model…" />
              {streaming ? (
                <button type="button" className="secondary" onClick={() => abort.current?.abort()}>Stop</button>
              ) : (
                <button type="submit" disabled={draft.trim() === ''}>Send</button>
              )}
            </form>
          </>
        )}
      </Card>
      <Card title="Use it from your tools" actions={<CopyButton text={snippet} label="Copy the API snippet" />}>
        <p className="muted small">Kiwi speaks the OpenAI API. Point editors, scripts and chat apps at <code>{base}</code>.</p>
        <pre className="snippet"><code>{snippet}</code></pre>
      </Card>
    </div>
  );
}
