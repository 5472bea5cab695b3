import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { decodeRingEvent, decodeWeightsChunk, encodeRingEvent, encodeWeightsChunk, HostToMemberBody, MAX_WEIGHTS_CHUNK_BYTES, MemberToHostBody, parsePipelineBody, parseStepMetadata, RingKind, stepMetadata } from './ring-protocol.js';

const code = (f: () => unknown): string => {
  try {
    f();
  } catch (err) {
    return isKiwiError(err) ? err.code : String(err);
  }
  return 'no error';
};

describe('ring protocol', () => {
  it('round-trips step metadata and ring events', () => {
    const rows = [{ id: 3, pos: 0, cap: 48 }, { id: 9, pos: 17, cap: 64 }];
    expect(parseStepMetadata(stepMetadata(2, 12, rows), 2)).toEqual({ epoch: 2, step: 12, rows });
    const bytes = encodeRingEvent({ type: 'free', ids: [3, 9] });
    expect(bytes[0]).toBe(RingKind.EVENT);
    expect(decodeRingEvent(bytes.subarray(1))).toEqual({ type: 'free', ids: [3, 9] });
  });

  it('refuses metadata whose rows do not match the batch, or are malformed', () => {
    expect(code(() => parseStepMetadata(stepMetadata(1, 1, [{ id: 1, pos: 0, cap: 8 }]), 2))).toBe('RING_PROTOCOL');
    expect(code(() => parseStepMetadata({ step: '1', rows: '[{"id":1,"pos":0,"cap":8}]' }, 1))).toBe('RING_PROTOCOL');
    expect(code(() => parseStepMetadata({ epoch: '0', step: '1', rows: '[{"id":1,"pos":0,"cap":8}]' }, 1))).toBe('RING_PROTOCOL');
    expect(code(() => parseStepMetadata({ epoch: '1', step: '1', rows: '[{"id":0,"pos":0,"cap":8}]' }, 1))).toBe('RING_PROTOCOL');
    expect(code(() => parseStepMetadata({ epoch: '1', step: '-1', rows: '[]' }, 0))).toBe('RING_PROTOCOL');
    expect(code(() => parseStepMetadata({ epoch: '1', step: '1', rows: 'not json' }, 1))).toBe('RING_PROTOCOL');
  });

  it('carries weights chunks as binary, and refuses malformed or oversized ones', () => {
    const data = Uint8Array.from({ length: 1000 }, (_, i) => i & 0xff);
    const chunk = decodeWeightsChunk(encodeWeightsChunk(5_000_000_123, data));
    expect(chunk.offset).toBe(5_000_000_123);
    expect(chunk.data).toEqual(data);
    expect(code(() => decodeWeightsChunk(new Uint8Array([1, 0, 0])))).toBe('RING_PROTOCOL');
    expect(code(() => decodeWeightsChunk(new Uint8Array(9)))).toBe('RING_PROTOCOL');
    expect(code(() => decodeWeightsChunk(encodeWeightsChunk(-1, data)))).toBe('RING_PROTOCOL');
    expect(code(() => decodeWeightsChunk(encodeWeightsChunk(0.5, data)))).toBe('RING_PROTOCOL');
    expect(code(() => decodeWeightsChunk(encodeWeightsChunk(0, new Uint8Array(MAX_WEIGHTS_CHUNK_BYTES + 1))))).toBe('RING_PROTOCOL');
  });

  it('refuses events that are not JSON, unknown or too large', () => {
    expect(code(() => decodeRingEvent(new TextEncoder().encode('{')))).toBe('RING_PROTOCOL');
    expect(code(() => decodeRingEvent(new TextEncoder().encode('{"type":"explode"}')))).toBe('RING_PROTOCOL');
    expect(code(() => decodeRingEvent(new Uint8Array(70_000)))).toBe('RING_PROTOCOL');
  });

  it('validates control bodies in both directions', () => {
    const assign = {
      kind: 'assign', epoch: 1, start: 1, end: 3, prev: 0, next: 2, encoding: 'f16', zstd: true, receive: { tensor: 'f32', zstd: false },
      model: { fingerprint: 'a'.repeat(64), name: 'm.gguf', fileBytes: 10 }, maxPositions: 512,
    };
    expect(parsePipelineBody(HostToMemberBody, assign)).toEqual(assign);
    expect(code(() => parsePipelineBody(HostToMemberBody, { ...assign, encoding: 'f8' }))).toBe('RING_PROTOCOL');
    const withUrl = { ...assign, model: { ...assign.model, url: 'https://example.org/m.gguf' } };
    expect(parsePipelineBody(HostToMemberBody, withUrl)).toEqual(withUrl);
    expect(code(() => parsePipelineBody(HostToMemberBody, { ...assign, model: { ...assign.model, url: 'file:///etc/passwd' } }))).toBe('RING_PROTOCOL');
    expect(code(() => parsePipelineBody(HostToMemberBody, { kind: 'weights-chunk', offset: 0, data: 'AAAA' }))).toBe('RING_PROTOCOL');
    expect(code(() => parsePipelineBody(HostToMemberBody, { ...assign, epoch: 0 }))).toBe('RING_PROTOCOL');
    expect(parsePipelineBody(MemberToHostBody, { kind: 'ready', epoch: 1, source: 'host', transferredBytes: 5, loadMs: 1 }).kind).toBe('ready');
    expect(parsePipelineBody(MemberToHostBody, { kind: 'ready', epoch: 2, source: 'kept', transferredBytes: 0, loadMs: 1 }).kind).toBe('ready');
    expect(parsePipelineBody(MemberToHostBody, { kind: 'opening', epoch: 2, source: 'host', transferredBytes: 9 }).kind).toBe('opening');
    expect(code(() => parsePipelineBody(MemberToHostBody, { kind: 'opening', epoch: 2, source: 'host', transferredBytes: -1 }))).toBe('RING_PROTOCOL');
    expect(code(() => parsePipelineBody(MemberToHostBody, { kind: 'ready', epoch: 1, source: 'somewhere', transferredBytes: 5, loadMs: 1 }))).toBe('RING_PROTOCOL');
    expect(parsePipelineBody(MemberToHostBody, { kind: 'leaving' })).toEqual({ kind: 'leaving' });
    expect(parsePipelineBody(HostToMemberBody, { kind: 'released' })).toEqual({ kind: 'released' });
    const failed = { type: 'step-failed', epoch: 3, step: 7, code: 'X', message: 'm' } as const;
    expect(decodeRingEvent(encodeRingEvent(failed).subarray(1))).toEqual(failed);
  });
});
