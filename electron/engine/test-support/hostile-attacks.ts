// The crafted ring messages of test-support/hostile-member.ts, one list per attack: what a hostile
// member sends in place of its stage's output. Test-only.
import { zstdCompress } from '../transport/compression.js';
import { encodeSafetensors, encodeStepFrame, type RawTensor } from '../transport/tensor-frame.js';
import { encodeRingEvent, encodeRingStep, RingKind, stepMetadata, type Assign, type StepRow } from '../pipeline/ring-protocol.js';

/** What the member sends in place of its stage's output. */
export const ATTACKS = [
  /** A 20-byte zstd step frame whose header declares 16 MiB (it once aborted the codec and killed the host). */
  'zstd-bomb',
  /** A zstd frame that really inflates to 64 MiB of zeros from a few KiB. */
  'zstd-inflate',
  /** A safetensors header that claims 2^40 bytes, and a tensor shape of 2^40 elements over 16 bytes. */
  'oversized-header',
  /** f16 activations on a link that agreed on f32, and zstd on a link that agreed on none. */
  'wrong-encoding',
  /** The right step with NaN and infinite activations (what an fp16 overflow gives): a precision problem, not evicted. */
  'nan',
  /** The step's hidden states with another row count than was sent, and twice the tokens (sequence overflow). */
  'wrong-rows',
  /** Hidden states of the wrong width. */
  'wrong-hidden',
  /** An unknown ring message kind, random bytes and a truncated frame. */
  'garbage',
  /** Thousands of step frames for steps that are not in flight, as fast as the link takes them. */
  'flood',
] as const;
export type Attack = (typeof ATTACKS)[number];

export async function crafted(attack: Attack, a: Assign, step: number, rows: StepRow[], seq: number, hidden: number): Promise<Uint8Array[]> {
  const meta = stepMetadata(a.epoch, step, rows);
  const hiddenOf = (batch: number, tokens: number, width: number, fill = 0.5): Float32Array => new Float32Array(batch * tokens * width).fill(fill);
  const wire = { encoding: a.encoding, zstd: a.zstd };
  switch (attack) {
    case 'zstd-bomb': {
      const out = new Uint8Array(1 + 4 + 20);
      const v = new DataView(out.buffer);
      out[0] = 1;
      v.setUint32(1, 16 << 20, true);
      v.setUint32(5, 0xfd2fb528, true);
      out[9] = 0xa0; // single segment, 4-byte content size
      v.setUint32(10, 16 << 20, true);
      return [encodeRingStep(out)];
    }
    case 'zstd-inflate': {
      const body = await zstdCompress(new Uint8Array(64 << 20));
      const out = new Uint8Array(5 + body.length);
      out[0] = 1;
      new DataView(out.buffer).setUint32(1, 64 << 20, true);
      out.set(body, 5);
      return [encodeRingStep(out)];
    }
    case 'oversized-header': {
      const head = new Uint8Array(1 + 8 + 16);
      new DataView(head.buffer).setBigUint64(1, 1n << 40n, true);
      const shape = encodeSafetensors(new Map([['hidden', { dtype: 'F32', shape: [1, 4, 4], data: new Uint8Array(64) } as RawTensor]]), { ...meta, encoding: 'f32' });
      const text = Buffer.from(shape).toString('latin1').replace('[1,4,4]', `[1,${2 ** 20},${2 ** 20}]`);
      return [encodeRingStep(head), encodeRingStep(Uint8Array.of(0, ...Buffer.from(text, 'latin1')))];
    }
    case 'wrong-encoding': {
      const other = a.encoding === 'f32' ? 'f16' : 'f32';
      const frame = { metadata: meta, tensor: { kind: 'hidden' as const, hidden: hiddenOf(rows.length, seq, hidden), dims: [rows.length, seq, hidden] as [number, number, number] } };
      return [encodeRingStep(await encodeStepFrame(frame, { encoding: other, zstd: a.zstd })), encodeRingStep(await encodeStepFrame(frame, { encoding: a.encoding, zstd: !a.zstd }))];
    }
    case 'nan': {
      const h = hiddenOf(rows.length, seq, hidden);
      h[0] = Number.NaN;
      h[1] = Number.POSITIVE_INFINITY;
      return [encodeRingStep(await encodeStepFrame({ metadata: meta, tensor: { kind: 'hidden', hidden: h, dims: [rows.length, seq, hidden] } }, wire))];
    }
    case 'wrong-rows': {
      const twice = [...rows, ...rows.map((r) => ({ ...r, id: r.id + 1000 }))];
      return [encodeRingStep(await encodeStepFrame({ metadata: stepMetadata(a.epoch, step, twice), tensor: { kind: 'hidden', hidden: hiddenOf(twice.length, 1, hidden), dims: [twice.length, 1, hidden] } }, wire)),
        encodeRingStep(await encodeStepFrame({ metadata: meta, tensor: { kind: 'hidden', hidden: hiddenOf(rows.length, seq * 2, hidden), dims: [rows.length, seq * 2, hidden] } }, wire))];
    }
    case 'wrong-hidden':
      return [encodeRingStep(await encodeStepFrame({ metadata: meta, tensor: { kind: 'hidden', hidden: hiddenOf(rows.length, seq, hidden + 1), dims: [rows.length, seq, hidden + 1] } }, wire))];
    case 'garbage':
      return [Uint8Array.of(7, 1, 2, 3), Uint8Array.from({ length: 4096 }, (_, i) => (i * 131) & 0xff), Uint8Array.of(RingKind.STEP, 0, 8, 0)];
    case 'flood': {
      const one = encodeRingStep(await encodeStepFrame({ metadata: stepMetadata(a.epoch, step + 100_000, rows), tensor: { kind: 'hidden', hidden: hiddenOf(rows.length, seq, hidden), dims: [rows.length, seq, hidden] } }, wire));
      return [...Array.from({ length: 5000 }, () => one), encodeRingEvent({ type: 'free', ids: [1] })];
    }
  }
}

