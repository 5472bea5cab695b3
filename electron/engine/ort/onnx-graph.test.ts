import { describe, expect, test } from 'vitest';
import onnxProto from 'onnx-proto';
import { createStageSession, f32Tensor } from './session.js';
import { GraphBuilder, MS_DOMAIN, encodeModel, f32Bytes } from './onnx-graph.js';

const { onnx } = onnxProto;

function addGraph(): GraphBuilder {
  const g = new GraphBuilder('t');
  const x = g.input('x', 'float32', ['batch', 4]);
  const w = g.initializer('w', 'float32', [4], f32Bytes(Float32Array.of(1, 2, 3, 4)));
  const big = g.initializer('big', 'float32', [512], f32Bytes(new Float32Array(512).fill(0.5)));
  const gamma = g.initializer('gamma', 'float32', [4], f32Bytes(Float32Array.of(1, 1, 1, 1)));
  const sum = g.op('Add', [x, w]);
  const [normed, , , skipSum] = g.node('SkipSimplifiedLayerNormalization', [sum, x, gamma], { domain: MS_DOMAIN, attrs: { epsilon: { float: 1e-6 } }, outputs: 4 });
  g.op('Identity', [normed!], { output: 'normed' });
  g.op('Identity', [skipSum!], { output: 'skip_sum' });
  g.op('ReduceSum', [big], { output: 'big_sum', attrs: { keepdims: 0 } });
  g.output('normed', 'float32', ['batch', 4]);
  g.output('skip_sum', 'float32', ['batch', 4]);
  g.output('big_sum', 'float32', []);
  return g;
}

describe('ONNX model writer', () => {
  test('writes IR 10 with ai.onnx 21 and com.microsoft 1, and onnxruntime runs it', async () => {
    const { model } = encodeModel(addGraph());
    const decoded = onnx.ModelProto.decode(model);
    expect(Number(decoded.irVersion)).toBe(10);
    expect(decoded.opsetImport.map((o) => [o.domain, Number(o.version)])).toEqual([['', 21], ['com.microsoft', 1]]);
    const session = await createStageSession(model, { provider: 'cpu', threads: 1 });
    try {
      const out = await session.run({ x: f32Tensor(Float32Array.of(1, 1, 1, 1), [1, 4]) });
      // SkipSimplifiedLayerNormalization output 3 is input + skip: (x + w) + x.
      expect(Array.from(out.skip_sum!.data as Float32Array)).toEqual([3, 4, 5, 6]);
      const n = out.normed!.data as Float32Array;
      const rms = Math.sqrt((9 + 16 + 25 + 36) / 4);
      expect(n[0]).toBeCloseTo(3 / rms, 5);
      expect((out.big_sum!.data as Float32Array)[0]).toBe(256);
    } finally {
      await session.dispose();
    }
  });

  test('puts large initializers in external data at 64-byte aligned offsets without copying them', () => {
    const g = addGraph();
    const enc = encodeModel(g, { externalDataFile: 'weights.bin' });
    expect(enc.external).toHaveLength(1);
    expect(enc.external[0]!.offset % 64).toBe(0);
    expect(enc.external[0]!.bytes).toBe(g.initializers.find((i) => i.name === 'big')!.bytes);
    expect(enc.externalBytes).toBe(2048);
    const big = (onnx.ModelProto.decode(enc.model).graph?.initializer ?? []).find((t) => t.name === 'big')!;
    expect(big.dataLocation).toBe(onnx.TensorProto.DataLocation.EXTERNAL);
    expect((big.externalData ?? []).map((e) => [e.key, e.value])).toEqual([['location', 'weights.bin'], ['offset', '0'], ['length', '2048']]);
  });

  test('rejects an initializer whose bytes do not match its shape, and duplicate names', () => {
    const g = new GraphBuilder('t');
    expect(() => g.initializer('w', 'float32', [3], new Uint8Array(8))).toThrow(/expected 12/);
    g.input('x', 'float32', [1]);
    expect(() => g.input('x', 'float32', [1])).toThrow(/duplicate/);
  });
});
