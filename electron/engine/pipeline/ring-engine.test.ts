// The host's ring engine against a member that misbehaves, in one process: real secure links over
// an in-memory link pair, the real head stage of stories260K, and the member's end driven by the
// test with crafted ring messages. Whatever arrives, nothing throws out of the engine's handlers.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKiwiError, type KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { Stage } from '../runtime/stage.js';
import { createMemoryLinkPair } from '../transport/link.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import { decodeStepFrame, encodeStepFrame } from '../transport/tensor-frame.js';
import { RingEngine, type PeerFault } from './ring-engine.js';
import { encodeRingEvent, encodeRingStep, parseStepMetadata } from './ring-protocol.js';

let head: Stage;
beforeAll(async () => {
  const file = await openGguf(await testModelPath('stories260K.gguf'));
  const shape = await modelShapeFromGguf(file, { maxPositions: 64 });
  head = await Stage.open(file, shape, { start: shape.blockCount, end: shape.blockCount, head: true }, { threads: 1 });
}, 60_000);
afterAll(async () => head?.dispose());

interface Rig {
  engine: RingEngine;
  member: SecureLink;
  hostEnd: SecureLink;
  faults: Array<{ peer: number; fault: PeerFault; code: string }>;
  broken: KiwiError[];
  /** The next step the host sends, decoded as the member sees it. */
  nextStep(): Promise<{ epoch: number; step: number; rows: Array<{ id: number; pos: number; cap: number }>; seq: number }>;
}

async function rig(): Promise<Rig> {
  const [a, b] = createMemoryLinkPair();
  const secret = { secret: randomBytes(32), context: 'ring|unit' };
  const [hostEnd, member] = await Promise.all([openSecureLink(a, { role: 'initiator', secret }), openSecureLink(b, { role: 'responder', secret })]);
  const faults: Rig['faults'] = [];
  const broken: KiwiError[] = [];
  const engine = new RingEngine({ link: (peer) => (peer === 1 ? hostEnd : undefined) }, {
    epoch: 3, first: undefined, head, firstPeer: 1, lastPeer: 1, wire: { encoding: 'f32', zstd: false }, receive: { tensor: 'f32', zstd: false },
    onBroken: (err) => broken.push(err),
    onPeerFault: (peer, fault, err) => faults.push({ peer, fault, code: err.code }),
  });
  const queue: Uint8Array[] = [];
  let wake: (() => void) | undefined;
  member.onMessage((m) => {
    queue.push(m.slice());
    wake?.();
  });
  const nextStep: Rig['nextStep'] = async () => {
    for (;;) {
      const m = queue.shift();
      if (m !== undefined && m[0] === 1) {
        const f = await decodeStepFrame(m.subarray(1), { maxBytes: 1 << 20 });
        return { ...parseStepMetadata(f.metadata, f.tensor.dims[0]), seq: f.tensor.dims[1] };
      }
      if (m === undefined) await new Promise<void>((r) => (wake = r));
    }
  };
  return { engine, member, hostEnd, faults, broken, nextStep };
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return isKiwiError(err) ? err.code : `not a KiwiError: ${String(err)}`;
  }
}

const hidden = (rows: number, seq: number, fill = 0.25): Float32Array => new Float32Array(rows * seq * head.shape.hidden).fill(fill);

describe('the ring engine with a misbehaving last member', () => {
  it('answers a good step with logits', async () => {
    const r = await rig();
    r.engine.open(1, 16);
    const out = r.engine.step([{ id: 1, tokens: [1, 2], pos: 0, cap: 16 }]);
    const s = await r.nextStep();
    r.member.send(encodeRingStep(await encodeStepFrame({ metadata: { epoch: String(s.epoch), step: String(s.step), rows: JSON.stringify(s.rows) }, tensor: { kind: 'hidden', hidden: hidden(1, 2), dims: [1, 2, head.shape.hidden] } }, { encoding: 'f32', zstd: false })));
    const logits = await out;
    expect(logits[0]!.length).toBe(head.shape.vocab);
    expect(r.faults).toEqual([]);
  });

  it('fails a step with NaN activations as a precision problem (502), reports it, and keeps the ring', async () => {
    const r = await rig();
    r.engine.open(1, 16);
    const out = r.engine.step([{ id: 1, tokens: [1], pos: 0, cap: 16 }]);
    const s = await r.nextStep();
    const h = hidden(1, 1);
    h[3] = Number.NaN;
    r.member.send(encodeRingStep(await encodeStepFrame({ metadata: { epoch: String(s.epoch), step: String(s.step), rows: JSON.stringify(s.rows) }, tensor: { kind: 'hidden', hidden: h, dims: [1, 1, head.shape.hidden] } }, { encoding: 'f32', zstd: false })));
    expect(await codeOf(out)).toBe('RING_PEER_NUMERIC');
    expect(r.faults).toEqual([{ peer: 1, fault: 'numeric', code: 'RING_PEER_NUMERIC' }]);
    expect(r.broken).toEqual([]);
    expect(r.member.closed).toBe(false);
  });

  it('fails a step returned with another row count or sequence (502), closes the link with an error frame and names the member', async () => {
    for (const shape of ['rows', 'seq'] as const) {
      const r = await rig();
      r.engine.open(1, 16);
      const out = r.engine.step([{ id: 1, tokens: [1, 2], pos: 0, cap: 16 }]);
      const s = await r.nextStep();
      const rows = shape === 'rows' ? [...s.rows, { id: 99, pos: 0, cap: 16 }] : s.rows;
      const seq = shape === 'seq' ? 4 : 1;
      const closed = new Promise<string>((resolve) => r.member.onClose((info) => resolve(info.error?.code ?? info.reason)));
      r.member.send(encodeRingStep(await encodeStepFrame({ metadata: { epoch: String(s.epoch), step: String(s.step), rows: JSON.stringify(rows) }, tensor: { kind: 'hidden', hidden: hidden(rows.length, seq), dims: [rows.length, seq, head.shape.hidden] } }, { encoding: 'f32', zstd: false })));
      expect(await codeOf(out)).toBe('RING_PEER_MALFORMED');
      expect(await closed).toBe('LINK_PEER_ERROR');
      expect(r.faults).toEqual([{ peer: 1, fault: 'malformed', code: 'RING_PEER_MALFORMED' }]);
      expect(r.broken.map((e) => e.code)).toEqual(['RING_BROKEN']);
    }
  });

  it('survives a 20-byte zstd frame declaring 16 MiB, an encoding it did not agree on, and garbage: the link ends, steps in flight are recomputed', async () => {
    const bomb = new Uint8Array(25);
    bomb[0] = 1;
    new DataView(bomb.buffer).setUint32(1, 16 << 20, true);
    new DataView(bomb.buffer).setUint32(5, 0xfd2fb528, true);
    bomb[9] = 0xa0;
    new DataView(bomb.buffer).setUint32(10, 16 << 20, true);
    const f16 = await encodeStepFrame({ metadata: {}, tensor: { kind: 'hidden', hidden: hidden(1, 1), dims: [1, 1, head.shape.hidden] } }, { encoding: 'f16', zstd: false });
    for (const msg of [encodeRingStep(bomb), encodeRingStep(f16), Uint8Array.of(9, 9, 9), Uint8Array.of(2, 0x7b), new Uint8Array(0)]) {
      const r = await rig();
      r.engine.open(1, 16);
      const out = r.engine.step([{ id: 1, tokens: [1], pos: 0, cap: 16 }]);
      await r.nextStep();
      const closed = new Promise<string>((resolve) => r.member.onClose((info) => resolve(info.error?.code ?? info.reason)));
      r.member.send(msg);
      expect(await codeOf(out)).toBe('RING_BROKEN');
      expect(r.faults.map((f) => f.fault)).toEqual(['malformed']);
      expect(await closed).toBe('LINK_PEER_ERROR');
    }
  });

  it('passes a member\'s own stage failure on as a 502 code, never as the client\'s (CONTEXT_EXCEEDED would be a 400)', async () => {
    const r = await rig();
    r.engine.open(1, 16);
    const out = r.engine.step([{ id: 1, tokens: [1], pos: 0, cap: 16 }]);
    const s = await r.nextStep();
    r.member.send(encodeRingEvent({ type: 'step-failed', epoch: s.epoch, step: s.step, code: 'CONTEXT_EXCEEDED', message: 'the request needs 99 positions' }));
    expect(await codeOf(out)).toBe('RING_STAGE_FAILED');
    expect(r.member.closed).toBe(false);
  });
});
