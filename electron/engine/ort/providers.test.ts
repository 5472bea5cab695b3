import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { encodeModel, f32Bytes, GraphBuilder } from './onnx-graph.js';
import { listedBackends, openProbeSession, ortPackageDir, providerBundled, providerLibraryFile, providerLibraryInstalled } from './providers.js';

/** y = x * 2. */
function doubleModel(): Uint8Array {
  const g = new GraphBuilder('double');
  const x = g.input('x', 'float32', [3]);
  const two = g.initializer('two', 'float32', [1], f32Bytes(Float32Array.of(2)));
  g.op('Mul', [x, two], { output: 'y' });
  g.output('y', 'float32', [3]);
  return encodeModel(g).model;
}

describe('execution providers of onnxruntime-node', () => {
  it('lists the CPU backend as bundled, and the separate libraries as not', async () => {
    expect(await listedBackends()).toContainEqual({ name: 'cpu', bundled: true });
    expect(providerBundled('cpu')).toBe(true);
    expect(providerBundled('cuda')).toBe(false);
    expect(providerLibraryInstalled('cpu')).toBe(true);
  });

  it('finds the package and names a provider library as the platform does', () => {
    expect(existsSync(join(ortPackageDir(), 'package.json'))).toBe(true);
    expect(providerLibraryFile('cuda')).toBe(process.platform === 'win32' ? 'onnxruntime_providers_cuda.dll' : 'libonnxruntime_providers_cuda.so');
  });
});

describe('probe sessions', () => {
  it('run the graph on the same inputs each time and give its float32 outputs', async () => {
    const session = await openProbeSession(doubleModel(), { provider: 'cpu', feeds: { x: { data: Float32Array.of(1, 2, 3), dims: [3] } }, logSeverityLevel: 4 });
    try {
      for (let i = 0; i < 2; i++) expect(Array.from((await session.run()).y!)).toEqual([2, 4, 6]);
    } finally {
      await session.release();
    }
  });

  it("reject with onnxruntime's error for a provider that cannot start", async () => {
    await expect(openProbeSession(doubleModel(), { provider: 'no-such-provider', feeds: {}, logSeverityLevel: 4 })).rejects.toThrow(/no-such-provider/);
  });

  it('refuse an output that is not float32', async () => {
    const g = new GraphBuilder('shape');
    const x = g.input('x', 'float32', [3]);
    g.op('Shape', [x], { output: 'n' });
    g.output('n', 'int64', [1]);
    const session = await openProbeSession(encodeModel(g).model, { provider: 'cpu', feeds: { x: { data: Float32Array.of(1, 2, 3), dims: [3] } }, logSeverityLevel: 4 });
    try {
      await expect(session.run()).rejects.toThrow(/probe output n has type int64/);
    } finally {
      await session.release();
    }
  });
});
