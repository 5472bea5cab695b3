// The renderer's only way to the engine: the control API over HTTP + SSE (common/control-api.ts).
// Its address and token come from the preload bridge inside Electron, or from the page's own
// origin and the `#token=` fragment when a headless `kiwi host` serves this UI.
import { useQueryClient, type QueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import type { z } from 'zod';
import { ControlEvent, DeviceCard, ErrorBody, SessionStatus } from '../../common/control-api.js';

export interface ControlAddress {
  url: string;
  token: string;
}

interface KiwiBridge {
  controlApiAddress(): Promise<ControlAddress | null>;
}

declare global {
  interface Window {
    kiwi?: KiwiBridge;
  }
}

const TOKEN_KEY = 'kiwi.controlToken';

/** Finds the control API: the preload's answer, else this origin with the fragment's token. */
export async function resolveAddress(): Promise<ControlAddress> {
  if (window.kiwi !== undefined) {
    const a = await window.kiwi.controlApiAddress();
    if (a === null) throw new ApiError('CONTROL_UNAVAILABLE', 'Kiwi\'s engine is still starting. This window retries in a moment.');
    return a;
  }
  const fromHash = new URLSearchParams(window.location.hash.slice(1)).get('token');
  if (fromHash !== null) {
    sessionStorage.setItem(TOKEN_KEY, fromHash);
    // The token should not stay visible in the address bar (or in screenshots of it).
    history.replaceState(null, '', window.location.pathname + window.location.search);
  }
  const token = fromHash ?? sessionStorage.getItem(TOKEN_KEY);
  if (token === null) throw new ApiError('CONTROL_UNAUTHORIZED', 'Open this page with the address Kiwi printed (it ends in #token=...).');
  return { url: `${window.location.origin}/api`, token };
}

export class ApiError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

let address: Promise<ControlAddress> | undefined;
function controlAddress(): Promise<ControlAddress> {
  address ??= resolveAddress().catch((err: unknown) => {
    address = undefined;
    throw err;
  });
  return address;
}

async function request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  const a = await controlAddress();
  const res = await fetch(`${a.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${a.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    ...(signal !== undefined ? { signal } : {}),
  });
  if (!res.ok) {
    const body: unknown = await res.json().catch(() => null);
    const parsed = ErrorBody.safeParse(body);
    if (parsed.success) throw new ApiError(parsed.data.error.code, parsed.data.error.message);
    // The chat relay passes the OpenAI API's errors through: {error:{message,type,code|null}}.
    const message = (body as { error?: { message?: unknown } } | null)?.error?.message;
    throw new ApiError(`HTTP_${res.status}`, typeof message === 'string' ? message : `Kiwi answered HTTP ${res.status}.`);
  }
  return res;
}

async function call<T extends z.ZodType>(schema: T, method: string, path: string, body?: unknown): Promise<z.infer<T>> {
  const res = await request(method, path, body);
  return schema.parse(await res.json());
}

export const api = {
  status: () => call(SessionStatus, 'GET', '/status'),
  device: () => call(DeviceCard, 'GET', '/device'),
  bench: (refresh: boolean) => call(DeviceCard, 'POST', '/device/bench', { refresh }),
  /** Hosts a local GGUF file, or downloads `{ url }` into the model cache first and hosts it then; 'built-in': the embedded stories260K. `draftModel`: a small GGUF that drafts for speculative decoding. */
  host: (model: { path: string } | { url: string } | 'built-in', options: { autoApprove: boolean; fastLayout: boolean; draftModel: string; standbyGb?: number | undefined }) =>
    call(SessionStatus, 'POST', '/session/host', {
      ...(model === 'built-in' ? {} : 'path' in model ? { model: model.path } : { model_url: model.url }),
      auto_approve: options.autoApprove,
      ...(options.fastLayout ? { weight_layout: 'fast' } : {}),
      ...(options.draftModel.trim() !== '' ? { draft_model: options.draftModel.trim() } : {}),
      ...(options.standbyGb !== undefined ? { standby_gb: options.standbyGb } : {}),
    }),
  cancelDownload: () => call(SessionStatus, 'POST', '/session/download/cancel', {}),
  join: (code: string, rendezvous: string | undefined, name?: string, memoryMb?: number, standbyGb?: number) =>
    call(SessionStatus, 'POST', '/session/join', {
      code, ...(rendezvous ? { rendezvous } : {}), ...(name ? { name } : {}), ...(memoryMb !== undefined ? { memory_mb: memoryMb } : {}), ...(standbyGb !== undefined ? { standby_gb: standbyGb } : {}),
    }),
  leave: () => call(SessionStatus, 'POST', '/session/leave', {}),
  pause: (paused: boolean) => call(SessionStatus, 'POST', '/session/pause', { paused }),
  decide: (memberId: string, approve: boolean) => call(SessionStatus, 'POST', '/session/decide', { member_id: memberId, approve }),
  /** Streams a chat completion's text through the control API's relay to this machine's /v1. */
  async *chat(messages: Array<{ role: 'user' | 'assistant' | 'system'; content: string }>, signal: AbortSignal): AsyncGenerator<string> {
    const res = await request('POST', '/chat', { messages, max_tokens: 200 }, signal);
    for await (const data of sseData(res)) {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }>; error?: { message: string } };
      if (chunk.error !== undefined) throw new ApiError('CHAT_FAILED', chunk.error.message);
      const text = chunk.choices?.[0]?.delta?.content;
      if (text) yield text;
    }
  },
};

/** The `data:` payloads of a text/event-stream response. */
async function* sseData(res: Response): AsyncGenerator<string> {
  if (res.body === null) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let i: number;
    while ((i = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, i);
      buffer = buffer.slice(i + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data !== '') yield data;
    }
  }
}

function applyEvent(client: QueryClient, e: ControlEvent): void {
  if (e.type === 'status') client.setQueryData(['status'], e.status);
  else client.setQueryData(['device'], e.device);
}

/** Keeps the status and device queries live from the event stream; reconnects when it drops. */
export function useControlEvents(): { connected: boolean } {
  const client = useQueryClient();
  const [connected, setConnected] = useState(false);
  useEffect(() => {
    const abort = new AbortController();
    void (async () => {
      while (!abort.signal.aborted) {
        try {
          const res = await request('GET', '/events', undefined, abort.signal);
          setConnected(true);
          for await (const data of sseData(res)) {
            const parsed = ControlEvent.safeParse(JSON.parse(data));
            if (parsed.success) applyEvent(client, parsed.data);
          }
        } catch (err) {
          if (abort.signal.aborted) return;
          console.warn('control API event stream dropped; reconnecting', err);
        }
        setConnected(false);
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    return () => abort.abort();
  }, [client]);
  return { connected };
}
