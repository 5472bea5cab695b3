// A job's choices streamed as server-sent events: each endpoint gives the shape of its events
// (StreamShape), this runs the choices, interleaves their events as they come, ends with usage and
// the closing event, and turns a failure after the headers into an error event. The slot is freed
// and every generation ended when the stream ends, fails or stops being read.
import { isKiwiError } from '../errors.js';
import type { CompletionBackend, FinishReason } from '../completion/completion-backend.js';
import type { RequestLog } from './api-endpoint.js';
import { isAbort, sse, sseEvent, type ApiResponse } from './api-response.js';
import type { Job } from './generation-job.js';
import { drive, stopDriving, type Piece, type Run } from './generation-pieces.js';
import { toOpenAiError } from './openai-errors.js';

export interface StreamShape {
  /** Each choice's opening event(s) ('' for none). */
  first(choice: number): string;
  piece(choice: number, piece: Piece): string;
  last(choice: number, finishReason: FinishReason): string;
  usage(completionTokens: number): string;
  /** The closing event; default `data: [DONE]`. */
  end?(finishReason: FinishReason, completionTokens: number): string;
}

export function streamJob(
  ctx: { backend: CompletionBackend; onError?: ((err: unknown) => void) | undefined },
  job: Job,
  log: RequestLog,
  shape: StreamShape,
): ApiResponse {
  // Tokens arrive from the backend as they are generated and wait here, per response, while this
  // client's socket is slow: the batch never waits for one client. With n > 1 the choices'
  // events interleave as they come, each chunk naming its choice.
  let completionTokens = 0;
  let lastReason: FinishReason = 'stop';
  async function* choice(i: number, run: Run): AsyncGenerator<string> {
    const pieces = drive(run, ctx.backend);
    try {
      const first = shape.first(i);
      if (first !== '') yield first;
      let next = await pieces.next();
      for (; next.done !== true; next = await pieces.next()) yield shape.piece(i, next.value);
      completionTokens += next.value.completionTokens;
      lastReason = next.value.finishReason;
      yield shape.last(i, next.value.finishReason);
    } finally {
      await stopDriving(pieces);
    }
  }
  async function* events(): AsyncGenerator<string> {
    const merged = mergeStreams(job.runs.map((run, i) => choice(i, run)));
    try {
      yield* merged;
      log.tokens = completionTokens;
      if (job.includeUsage) yield shape.usage(completionTokens);
      yield shape.end !== undefined ? shape.end(lastReason, completionTokens) : 'data: [DONE]\n\n';
    } catch (err) {
      // Headers are sent: the failure travels as an error event (the openai SDK raises it).
      if (!isKiwiError(err) && !isAbort(err)) ctx.onError?.(err);
      yield sseEvent(toOpenAiError(err).body);
    } finally {
      await merged.return(undefined);
      job.release();
    }
  }
  return sse(events());
}

/** Interleaves several event streams as their items arrive; ends when all did, throws the first failure. */
export async function* mergeStreams(streams: AsyncGenerator<string>[]): AsyncGenerator<string> {
  const next = (i: number) => streams[i]!.next().then((r) => ({ i, r }));
  const pending = new Map(streams.map((_, i) => [i, next(i)]));
  try {
    while (pending.size > 0) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done === true) pending.delete(i);
      else {
        pending.set(i, next(i));
        yield r.value;
      }
    }
  } finally {
    // A stream still pending when the merge ends early may reject later: nobody awaits it now.
    for (const p of pending.values()) p.catch(() => undefined);
    // Settle every stream (a cancelled request ends them all through its signal, or by return()).
    await Promise.allSettled(streams.map((s) => s.return(undefined)));
  }
}
