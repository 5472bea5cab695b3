import { describe, expect, it } from 'vitest';
import { isKiwiError, KiwiError } from '../errors.js';
import { isResolved, parseFleetFile, withModelSizes } from './fleet.js';

const example = {
  model: {
    name: 'qwen3-32b-q4_k_m',
    layers: 64,
    block_bytes: 292000000,
    head_bytes: 640000000,
    head_resident_bytes: 1070000000,
    kv_bytes_per_token_per_layer: 4096,
  },
  context: 4096,
  concurrency: 4,
  devices: [
    { name: 'alice-4090', memory_bytes: 23000000000, bandwidth_gbps: 1008, block_ms: null, nat: 'permissive', rendezvous_rtt_ms: 12 },
    { name: 'bob-m2', memory_bytes: 20000000000, bandwidth_gbps: 100 },
  ],
  rtt_ms: [['alice-4090', 'bob-m2', 2.5]],
};

function fleetError(value: unknown): KiwiError {
  try {
    parseFleetFile(value);
  } catch (err) {
    if (isKiwiError(err, 'FLEET_INVALID')) return err;
    throw err;
  }
  throw new Error('expected FLEET_INVALID');
}

describe('fleet file', () => {
  it('parses the example of the issue into typed sizes and devices', () => {
    const fleet = parseFleetFile(example);
    expect(isResolved(fleet)).toBe(true);
    expect(fleet.model).toEqual({
      name: 'qwen3-32b-q4_k_m',
      layers: 64,
      blockBytes: 292000000,
      headBytes: 640000000,
      headResidentBytes: 1070000000,
      kvBytesPerTokenPerLayer: 4096,
    });
    expect(fleet.devices[0]).toEqual({ name: 'alice-4090', memoryBytes: 23000000000, bandwidthGBps: 1008, nat: 'permissive', rendezvousRttMs: 12 });
    expect(fleet.devices[1]).toEqual({ name: 'bob-m2', memoryBytes: 20000000000, bandwidthGBps: 100 });
    expect(fleet.rtts).toEqual([{ a: 'alice-4090', b: 'bob-m2', rttMs: 2.5 }]);
  });

  it('treats concurrency, block_ms, nat, rendezvous_rtt_ms and rtt_ms as optional', () => {
    const fleet = parseFleetFile({ model: example.model, context: 128, devices: [{ name: 'solo', memory_bytes: 1e12 }] });
    expect(fleet.concurrency).toBe(1);
    expect(fleet.rtts).toEqual([]);
    expect(fleet.devices).toEqual([{ name: 'solo', memoryBytes: 1e12 }]);
  });

  it('reads a measured step time and the head\'s packed read bytes (cost-model.ts prices a stage by them)', () => {
    const fleet = parseFleetFile({
      model: { ...example.model, block_resident_bytes: 390000000, head_read_bytes: 850000000 },
      context: 128,
      devices: [{ name: 'solo', memory_bytes: 1e12, block_ms: 3.5, step_ms: 1.25, position_ms: 0.0004, head_ms: 11.5 }],
    });
    expect(fleet.devices).toEqual([{ name: 'solo', memoryBytes: 1e12, blockMs: 3.5, stepMs: 1.25, positionMs: 0.0004, headMs: 11.5 }]);
    expect(fleet.model).toMatchObject({ blockResidentBytes: 390000000, headReadBytes: 850000000 });
    expect(fleetError({ ...example, devices: [{ name: 'x', memory_bytes: 1, step_ms: -1 }] }).message).toMatch(/step_ms/);
    expect(fleetError({ ...example, devices: [{ name: 'x', memory_bytes: 1, position_ms: -1 }] }).message).toMatch(/position_ms/);
    expect(fleetError({ ...example, devices: [{ name: 'x', memory_bytes: 1, head_ms: -1 }] }).message).toMatch(/head_ms/);
  });

  it('accepts a model given as a GGUF path and resolves it with sizes read elsewhere', () => {
    const file = parseFleetFile({ ...example, model: { gguf: '/models/x.gguf' } });
    expect(isResolved(file)).toBe(false);
    expect(file.model).toEqual({ gguf: '/models/x.gguf' });
    const fleet = withModelSizes(file, { name: 'x', layers: 2, blockBytes: 10, headBytes: 1, headResidentBytes: 2, kvBytesPerTokenPerLayer: 4 });
    expect(fleet.model.layers).toBe(2);
  });

  it.each([
    ['a missing field', { ...example, context: undefined }, /context/],
    ['a negative memory', { ...example, devices: [{ name: 'x', memory_bytes: -1 }] }, /devices\[0\]\.memory_bytes/],
    ['a fractional layer count', { ...example, model: { ...example.model, layers: 2.5 } }, /model/],
    ['zero devices', { ...example, devices: [] }, /devices/],
    ['an unknown NAT class', { ...example, devices: [{ name: 'x', memory_bytes: 1, nat: 'full-cone' }] }, /devices\[0\]\.nat/],
    ['an unknown field', { ...example, extra: 1 }, /extra/],
    ['a zero bandwidth', { ...example, devices: [{ name: 'x', memory_bytes: 1, bandwidth_gbps: 0 }] }, /bandwidth_gbps/],
    ['a non-object', 'fleet', /top level/],
  ])('rejects %s with FLEET_INVALID naming the field', (_what, value, pattern) => {
    const err = fleetError(value);
    expect(err.message).toMatch(pattern);
    expect(err.message).toMatch(/README/);
  });

  it('reads measured NAT mapping and filtering, and refuses values it does not know', () => {
    const devices = [{ ...example.devices[0], nat_mapping: 'address-dependent', nat_filtering: 'port-dependent' }, example.devices[1]];
    expect(parseFleetFile({ ...example, devices }).devices[0]).toMatchObject({ natMapping: 'address-dependent', natFiltering: 'port-dependent' });
    expect(fleetError({ ...example, devices: [{ ...example.devices[0], nat_mapping: 'symmetric' }] }).message).toMatch(/devices\[0\]\.nat_mapping/);
  });

  it('rejects two devices with the same name', () => {
    expect(fleetError({ ...example, devices: [example.devices[1], example.devices[1]] }).message).toMatch(/two devices are named 'bob-m2'/);
  });

  it('rejects an rtt_ms entry naming an unknown device', () => {
    expect(fleetError({ ...example, rtt_ms: [['alice-4090', 'carol', 3]] }).message).toMatch(/'carol'/);
  });

  it('rejects an rtt_ms entry pairing a device with itself or given twice', () => {
    expect(fleetError({ ...example, rtt_ms: [['bob-m2', 'bob-m2', 3]] }).message).toMatch(/itself/);
    expect(fleetError({ ...example, rtt_ms: [['bob-m2', 'alice-4090', 3], ['alice-4090', 'bob-m2', 4]] }).message).toMatch(/twice/);
  });

  it('rejects more devices than the hard limit before planning', () => {
    const devices = Array.from({ length: 65 }, (_, i) => ({ name: `d${i}`, memory_bytes: 1 }));
    expect(fleetError({ ...example, devices }).message).toMatch(/devices/);
  });

  it('rejects model sizes from code that break the same rules', () => {
    const file = parseFleetFile({ ...example, model: { gguf: 'x.gguf' } });
    expect(() => withModelSizes(file, { name: 'x', layers: 0, blockBytes: 10, headBytes: 1, headResidentBytes: 2, kvBytesPerTokenPerLayer: 4 })).toThrow(
      /layers/,
    );
  });
});
