// One generation's events as the pieces of text a response sends: the backend's text goes through
// the stop filter (stop-sequences.ts), each piece carries the tokens whose text it holds (for
// logprobs), and the end says why it ended. Leaving early (a stop sequence, a response no longer
// read) closes the backend's iterable, which cancels the generation and frees its KV blocks.
import type { TokenLogprobs } from '../runtime/sampling.js';
import type { CompletionBackend, FinishReason, GenerationEvent } from '../completion/completion-backend.js';
import { StopSequenceFilter } from './stop-sequences.js';

/** One choice's generation: the backend's events and the stop sequences that end it. */
export interface Run {
  events: AsyncIterable<GenerationEvent>;
  stop: readonly string[];
}

/** A generated token as the logprobs of a response show it. */
export interface TokenInfo {
  id: number;
  /** The token's own text (its piece). */
  text: string;
  logprobs?: { logprob: number; top: Array<{ text: string; logprob: number }> } | undefined;
}

/** Text to send, with the tokens whose text it holds (for logprobs). */
export interface Piece {
  text: string;
  tokens: TokenInfo[];
}

export interface DriveResult {
  finishReason: FinishReason;
  completionTokens: number;
}

export interface CollectResult extends DriveResult {
  text: string;
  tokens: TokenInfo[];
}

export function tokenInfo(backend: CompletionBackend, id: number, text: string, lp: TokenLogprobs | undefined): TokenInfo {
  const piece = (i: number): string => backend.tokenPiece?.(i) ?? text;
  return { id, text: piece(id), logprobs: lp === undefined ? undefined : { logprob: lp.logprob, top: lp.top.map((a) => ({ text: piece(a.id), logprob: a.logprob })) } };
}

/**
 * The backend's text through the stop filter: yields the text to send with the tokens that made it,
 * returns how it ended. Ends at a stop sequence (leaving the backend's iterable early, which cancels
 * the generation and frees its KV blocks) or at the backend's end event. A token goes out with the
 * first text that holds any of its characters; tokens wholly inside a stop sequence are dropped.
 */
export async function* drive(run: Run, backend: CompletionBackend): AsyncGenerator<Piece, DriveResult> {
  const filter = new StopSequenceFilter(run.stop);
  let completionTokens = 0;
  let received = 0; // characters the filter was given
  let sent = 0; // characters it let through
  const held: Array<{ token: TokenInfo; start: number }> = [];
  // Tokens that showed some of their text (or every one, once nothing is held back).
  const take = (): TokenInfo[] => {
    const out: TokenInfo[] = [];
    while (held.length > 0 && (held[0]!.start < sent || sent === received)) out.push(held.shift()!.token);
    return out;
  };
  for await (const e of run.events) {
    if (e.type === 'token') {
      completionTokens++;
      held.push({ token: tokenInfo(backend, e.id, e.text, e.logprobs), start: received });
    }
    received += e.text.length;
    const r = filter.push(e.text);
    sent += r.text.length;
    if (r.text !== '') yield { text: r.text, tokens: take() };
    if (r.stopped) return { finishReason: 'stop', completionTokens };
    if (e.type === 'end') {
      const rest = filter.flush();
      sent += rest.length;
      // A stop sequence the held text still hid cuts it: the tokens past the cut are dropped.
      const tokens = filter.stopped ? take() : held.splice(0).map((h) => h.token);
      if (rest !== '' || tokens.length > 0) yield { text: rest, tokens };
      return { finishReason: filter.stopped ? 'stop' : e.finishReason, completionTokens };
    }
  }
  throw new Error('the backend ended a generation without an end event');
}

/** Ends a drive() left suspended (the response stopped early), which cancels its generation; no-op once it finished. */
export async function stopDriving(pieces: AsyncGenerator<Piece, DriveResult>): Promise<void> {
  // return()'s value is only what a finished generator reports; nobody reads it here.
  await pieces.return(undefined as unknown as DriveResult);
}

/** Runs one choice to the end: text without the stop sequence, its tokens, finish reason, token count. */
export async function collect(run: Run, backend: CompletionBackend): Promise<CollectResult> {
  let text = '';
  const tokens: TokenInfo[] = [];
  const pieces = drive(run, backend);
  try {
    for (;;) {
      const next = await pieces.next();
      if (next.done === true) return { text, tokens, ...next.value };
      text += next.value.text;
      tokens.push(...next.value.tokens);
    }
  } finally {
    await stopDriving(pieces);
  }
}
