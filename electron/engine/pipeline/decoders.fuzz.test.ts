// Fuzzing (fast-check, 10,000 cases each) of every decoder that reads what a peer sent: link
// frames (frame-codec.ts, whole and streamed in chunks), step frames (tensor-frame.ts, each wire
// encoding with and without zstd), ring data and pipeline control bodies (pipeline/ring-protocol.ts),
// session control messages (session/session-messages.ts) and rendezvous messages. Each must fail
// only with a KiwiError, and never hand back more than its limits allow.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { decodeRingEvent, decodeWeightsChunk, encodeRingEvent, HostToMemberBody, MAX_WEIGHTS_CHUNK_BYTES, MemberToHostBody, parsePipelineBody, parseStepMetadata, stepMetadata } from './ring-protocol.js';
import { ClientMessage, decodeRelay, parseMessage, ServerMessage } from '../rendezvous/protocol.js';
import { decodeControl, HostToMember, MemberToHost, PakeBody, parseBody } from '../session/session-messages.js';
import { decodeFrame, encodeFrame, FrameDecoder, FrameType } from '../transport/frame-codec.js';
import { decodeStepFrame, encodeStepFrame, maxStepFrameBytes, type ActivationEncoding, type StepFrame } from '../transport/tensor-frame.js';

const RUNS = 10_000;

function onlyKiwi(f: () => void): void {
  try {
    f();
  } catch (err) {
    if (!isKiwiError(err)) throw err;
  }
}

async function onlyKiwiAsync(f: () => Promise<void>): Promise<void> {
  try {
    await f();
  } catch (err) {
    if (!isKiwiError(err)) throw err;
  }
}

/** Random bytes, or a valid sample with a few bytes changed, cut short or extended. */
function mutations(valid: readonly Uint8Array[], maxLength = 400): fc.Arbitrary<Uint8Array> {
  const sample = fc.constantFrom(...valid);
  return fc.oneof(
    fc.uint8Array({ maxLength }),
    fc.tuple(sample, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 })).map(([v, edits]) => {
      const b = v.slice();
      for (const [i, x] of edits) b[i % b.length] = x;
      return b;
    }),
    fc.tuple(sample, fc.nat()).map(([v, n]) => v.subarray(0, n % (v.length + 1))),
    fc.tuple(sample, fc.uint8Array({ minLength: 1, maxLength: 16 })).map(([v, tail]) => Uint8Array.from([...v, ...tail])),
  );
}

const json = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));
/** JSON values shaped like protocol messages: the right keys with values of any type. */
const messageLike = (keys: readonly string[], tags: Record<string, readonly string[]>): fc.Arbitrary<Record<string, unknown>> =>
  fc.record(Object.fromEntries(keys.map((k) => [k, tags[k] !== undefined ? fc.oneof(fc.constantFrom(...tags[k]!), fc.jsonValue()) : fc.jsonValue()])), { requiredKeys: [] });

describe('decoders of peer input, fuzzed', () => {
  it('link frames: whole or in chunks, only KiwiErrors and never a payload over the limit', () => {
    const limit = 1024;
    const valid = [
      encodeFrame({ type: FrameType.DATA, flags: 0, payload: Uint8Array.of(1, 2, 3) }),
      encodeFrame({ type: FrameType.PING, flags: 1, payload: new Uint8Array(20) }),
      encodeFrame({ type: FrameType.ERROR, flags: 0, payload: new Uint8Array(0) }),
    ];
    fc.assert(
      fc.property(mutations(valid), fc.array(fc.nat(64), { maxLength: 8 }), (bytes, cuts) => {
        onlyKiwi(() => {
          expect(decodeFrame(bytes, limit).payload.length).toBeLessThanOrEqual(limit);
        });
        const decoder = new FrameDecoder(limit);
        onlyKiwi(() => {
          let at = 0;
          for (const c of [...cuts, bytes.length]) {
            for (const f of decoder.push(bytes.subarray(at, at + c))) expect(f.payload.length).toBeLessThanOrEqual(limit);
            at += c;
          }
          decoder.end();
        });
        expect(decoder.bufferedBytes).toBeLessThanOrEqual(bytes.length);
      }),
      { numRuns: RUNS },
    );
  });

  it('step frames of every encoding, zstd or not: only KiwiErrors, nothing decoded beyond the limit', async () => {
    const hidden = Float32Array.from({ length: 2 * 8 }, (_, i) => Math.sin(i));
    const frame: StepFrame = { metadata: stepMetadata(1, 3, [{ id: 1, pos: 0, cap: 8 }]), tensor: { kind: 'hidden', hidden, dims: [1, 2, 8] } };
    const valid: Uint8Array[] = [];
    for (const encoding of ['f32', 'f16', 'int8'] as ActivationEncoding[]) {
      for (const zstd of [false, true]) valid.push(await encodeStepFrame(frame, { encoding, zstd }));
    }
    valid.push(await encodeStepFrame({ metadata: {}, tensor: { kind: 'ids', ids: BigInt64Array.of(1n, 2n), dims: [1, 2] } }, { encoding: 'f32', zstd: true }));
    const maxBytes = maxStepFrameBytes({ hidden: 8, maxRows: 4, maxSeq: 16 }, 'f32');
    await fc.assert(
      fc.asyncProperty(mutations(valid), fc.option(fc.record({ tensor: fc.constantFrom<'ids' | ActivationEncoding>('ids', 'f32', 'f16', 'int8'), zstd: fc.boolean() })), async (bytes, expect_) => {
        await onlyKiwiAsync(async () => {
          const out = await decodeStepFrame(bytes, { maxBytes, hidden: 8, ...(expect_ !== null ? { expect: expect_ } : {}) });
          const n = out.tensor.kind === 'ids' ? out.tensor.ids.length * 8 : out.tensor.hidden.length * 4;
          expect(n).toBeLessThanOrEqual(maxBytes);
          if (out.tensor.kind === 'hidden') expect(out.tensor.dims[2]).toBe(8);
        });
      }),
      { numRuns: RUNS },
    );
  }, 300_000);

  it('ring data and pipeline control bodies: only KiwiErrors', () => {
    const valid = [encodeRingEvent({ type: 'free', ids: [1, 2] }).subarray(1), encodeRingEvent({ type: 'step-failed', epoch: 1, step: 2, code: 'X', message: 'y' }).subarray(1)];
    const bodyKeys = ['kind', 'epoch', 'start', 'end', 'prev', 'next', 'encoding', 'zstd', 'receive', 'model', 'maxPositions', 'spans', 'peer', 'fault', 'code', 'message', 'source', 'memoryBytes'];
    const kinds = ['assign', 'weights-plan', 'released', 'assigned', 'weights-request', 'weights-progress', 'ready', 'failed', 'leaving', 'memory', 'peer-fault'];
    fc.assert(
      fc.property(
        mutations(valid, 200),
        messageLike(bodyKeys, { kind: kinds }),
        fc.dictionary(fc.constantFrom('epoch', 'step', 'rows', 'encoding'), fc.oneof(fc.string(), fc.jsonValue().map((v) => JSON.stringify(v)))),
        fc.nat(5000),
        (bytes, body, metadata, batch) => {
          onlyKiwi(() => void decodeRingEvent(bytes));
          onlyKiwi(() => void decodeWeightsChunk(bytes));
          onlyKiwi(() => void parsePipelineBody(HostToMemberBody, body));
          onlyKiwi(() => void parsePipelineBody(MemberToHostBody, body));
          onlyKiwi(() => {
            const m = parseStepMetadata(metadata, batch);
            expect(m.rows.length).toBe(batch);
          });
        },
      ),
      { numRuns: RUNS },
    );
    expect(decodeWeightsChunk(Uint8Array.from([1, ...new Uint8Array(8), 5])).data.length).toBeLessThanOrEqual(MAX_WEIGHTS_CHUNK_BYTES);
  });

  it('session and rendezvous control messages: only KiwiErrors', () => {
    const keys = ['type', 'kind', 't', 'name', 'memberId', 'peer', 'body', 'code', 'reason', 'capabilities', 'addresses', 'nameplate', 'msg', 'members'];
    const tags = { type: ['join', 'heartbeat', 'pipeline', 'welcome', 'roster', 'link', 'evicted', 'pake'], kind: ['pake', 'confirm'], t: ['claim', 'send', 'bind', 'msg', 'error', 'welcome'] };
    fc.assert(
      fc.property(messageLike(keys, tags), fc.uint8Array({ maxLength: 120 }), (msg, raw) => {
        for (const bytes of [json(msg), raw]) {
          onlyKiwi(() => void decodeControl(MemberToHost, bytes));
          onlyKiwi(() => void decodeControl(HostToMember, bytes));
          const text = Buffer.from(bytes).toString('utf8');
          onlyKiwi(() => void parseMessage(ClientMessage, text, 64 * 1024));
          onlyKiwi(() => void parseMessage(ServerMessage, text, 64 * 1024));
          onlyKiwi(() => void decodeRelay(bytes));
        }
        onlyKiwi(() => void parseBody(PakeBody, msg));
      }),
      { numRuns: RUNS },
    );
  });
});
