// Whether a one-pass replay (replay.ts) gives the decode steps' bits on this machine. It does where
// the quantized matmuls give a row the same bits in an n-row call as in a 1-row call, and that
// depends on the CPU's kernels, not only on the accuracy level: on the AVX-512 machine of stop 24,
// MatMulNBits at level 4 agreed for 4 and 8 bits; on an AVX2 AMD EPYC 4 bits at level 4 differ
// (up to 1.3e-6) while 8 bits agree (bench/replay-ops.ts). So it is measured here, once per
// process, provider, accuracy level and thread count, on a small random MatMulNBits of each bit
// width. At level 0 it is never exact (1-row f32 kernels differ from 2 or more rows everywhere
// measured), so that is not probed.
import { createStageSession, f32Tensor, tensorF32 } from '../ort/session.js';
import type { ExecutionProvider } from '../ort/session.js';
import { encodeModel, f32Bytes, GraphBuilder, MS_DOMAIN } from '../ort/onnx-graph.js';

// Large enough that the kernels take their blocked paths (a K of 1024 showed the difference).
const K = 1024;
const N = 256;
const BLOCK = 32;
const ROWS = 5;

const probes = new Map<string, Promise<boolean>>();

/** Whether MatMulNBits of 4 and 8 bits at `accuracyLevel` give each row the same bits for 1 row and for several, here. */
export function replayKernelsExact(accuracyLevel: 0 | 4, provider: ExecutionProvider, threads: number): Promise<boolean> {
  if (accuracyLevel === 0) return Promise.resolve(false);
  const key = `${provider}:${accuracyLevel}:${threads}`;
  let probe = probes.get(key);
  if (probe === undefined) {
    // A probe that cannot run (a provider without these kernels) answers "not exact": the decode-step replay is always exact.
    probe = (async () => (await rowsAgree(4, accuracyLevel, provider, threads)) && (await rowsAgree(8, accuracyLevel, provider, threads)))().catch(() => false);
    probes.set(key, probe);
  }
  return probe;
}

/** One MatMulNBits (block 32) from input `x` [1, seq, K] to output `y` [1, seq, N]; bench/replay-ops.ts times the same op. */
export function matmulNBitsGraph(m: { bits: 4 | 8; accuracyLevel: 0 | 4; K: number; N: number; weights: Uint8Array; scales: Float32Array }): GraphBuilder {
  const { bits, K, N } = m;
  const g = new GraphBuilder('matmulnbits');
  const x = g.input('x', 'float32', [1, 'seq', K]);
  const y = g.op(
    'MatMulNBits',
    [x, g.initializer('B', 'uint8', [N, K / BLOCK, (BLOCK * bits) / 8], m.weights), g.initializer('scales', 'float32', [(N * K) / BLOCK], f32Bytes(m.scales))],
    { domain: MS_DOMAIN, attrs: { K, N, bits, block_size: BLOCK, accuracy_level: m.accuracyLevel } },
  );
  g.op('Identity', [y], { output: 'y' });
  g.output('y', 'float32', [1, 'seq', N]);
  return g;
}

async function rowsAgree(bits: 4 | 8, accuracyLevel: 0 | 4, provider: ExecutionProvider, threads: number): Promise<boolean> {
  // A fixed linear congruential stream: the same weights every time.
  let seed = 7;
  const next = (): number => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  const weights = Uint8Array.from({ length: (N * K * bits) / 8 }, () => Math.floor(next() * 256));
  const scales = Float32Array.from({ length: (N * K) / BLOCK }, () => (next() * 2 - 1) * 0.01);
  const g = matmulNBitsGraph({ bits, accuracyLevel, K, N, weights, scales });
  const session = await createStageSession(encodeModel(g).model, { provider, threads });
  try {
    const input = Float32Array.from({ length: ROWS * K }, () => next() * 2 - 1);
    const all = tensorF32((await session.run({ x: f32Tensor(input, [1, ROWS, K]) })).y, 'y');
    for (let r = 0; r < ROWS; r++) {
      const one = tensorF32((await session.run({ x: f32Tensor(input.subarray(r * K, (r + 1) * K), [1, 1, K]) })).y, 'y');
      for (let i = 0; i < N; i++) if (!Object.is(one[i], all[r * N + i])) return false;
    }
    return true;
  } finally {
    await session.dispose();
  }
}
