// The host streams a member the bytes of its tensors when the member has no copy of the model:
// each span it asks for must be one of its stage's (weights-plan), read from the host's GGUF and
// sent as binary chunks over the control link, at most WINDOW_BYTES ahead of the member's
// acknowledgements (its weights-progress). A re-plan gives the member a new plan, which stops the
// stream of the old one.
import { open } from 'node:fs/promises';
import { KiwiError } from '../errors.js';
import type { HashedSpan } from './member-weights.js';
import { weightsChunkOf } from './ring-protocol.js';

const CHUNK_BYTES = 256 * 1024;
/** Bytes ahead of the member's acknowledgements (it acknowledges each MiB stored). */
const WINDOW_BYTES = 16 * 1024 * 1024;

interface Transfer {
  plan: readonly HashedSpan[];
  acked: number;
  wake: (() => void) | undefined;
}

export class WeightsSender {
  private readonly transfers = new Map<string, Transfer>();

  constructor(
    private readonly modelPath: string,
    /** Sends binary pipeline data to a member; false when it is not connected. */
    private readonly sendBytes: (memberId: string, bytes: Uint8Array) => boolean,
    private readonly stopped: () => boolean,
  ) {}

  /** The spans member `memberId` may ask for from now on (its new stage); ends any earlier stream to it. */
  plan(memberId: string, spans: readonly HashedSpan[]): void {
    this.transfers.set(memberId, { plan: spans, acked: 0, wake: undefined });
  }

  /** The member has stored this many bytes of the current stream. */
  acknowledge(memberId: string, receivedBytes: number): void {
    const t = this.transfers.get(memberId);
    if (t === undefined) return;
    t.acked = receivedBytes;
    t.wake?.();
  }

  /** Streams the spans a member asked for; throws RING_PROTOCOL for a span that is not among its tensors. */
  async send(memberId: string, spans: ReadonlyArray<{ offset: number; bytes: number }>): Promise<void> {
    const t = this.transfers.get(memberId);
    if (t === undefined) return;
    for (const s of spans) {
      if (!t.plan.some((p) => p.offset === s.offset && p.bytes === s.bytes)) {
        throw new KiwiError('RING_PROTOCOL', `A member asked for bytes ${s.offset}+${s.bytes}, which are not among its tensors.`);
      }
    }
    t.acked = 0;
    let sent = 0;
    const current = (): boolean => !this.stopped() && this.transfers.get(memberId) === t;
    const fh = await open(this.modelPath, 'r');
    try {
      for (const s of spans) {
        for (let at = 0; at < s.bytes; at += CHUNK_BYTES) {
          while (sent - t.acked > WINDOW_BYTES && current()) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 1000);
              t.wake = () => {
                clearTimeout(timer);
                resolve();
              };
            });
          }
          if (!current()) return;
          const n = Math.min(CHUNK_BYTES, s.bytes - at);
          // Read straight into the message (no copy between the file and the session).
          const chunk = weightsChunkOf(s.offset + at, n);
          const { bytesRead } = await fh.read(chunk.data, 0, n, s.offset + at);
          if (bytesRead !== n) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The model file ended at ${s.offset + at + bytesRead}, inside the span at ${s.offset} (+${s.bytes}).`);
          if (!this.sendBytes(memberId, chunk.message)) return;
          sent += n;
        }
      }
    } finally {
      await fh.close();
    }
  }
}
