// Rotary position tables (cos/sin caches for GroupQueryAttention), computed exactly as ggml's CPU
// rope does (ggml-cpu ops.cpp `ggml_rope_cache_init` / `rope_yarn`): theta is an f32 running
// product, divided by the optional per-pair frequency factors (Llama 3's `rope_freqs.weight`)
// and multiplied by the linear frequency scale. Pure: no I/O.

export interface RopeSettings {
  /** Rotated dimensions per head (llama: rope.dimension_count, usually head_dim). */
  dims: number;
  /** rope.freq_base (theta), 10000 by default. */
  freqBase: number;
  /** 1 / rope.scaling.factor for linear scaling, else 1. */
  freqScale: number;
  /** Per-pair divisors [dims/2] (Llama 3.1+ `rope_freqs.weight`), if the model has them. */
  freqFactors?: Float32Array;
}

/**
 * cos and sin tables, each [maxPositions, width] f32, row = position. `width` >= dims/2 pads
 * with pairs that do not rotate (cos 1, sin 0), for partial rotary or padded heads.
 */
export function ropeCaches(rope: RopeSettings, maxPositions: number, width = rope.dims / 2): { cos: Float32Array; sin: Float32Array } {
  if (rope.dims % 2 !== 0 || rope.dims <= 0) throw new Error(`rope dims ${rope.dims} must be even and positive`);
  const half = rope.dims / 2;
  if (width < half) throw new Error(`rope table width ${width} is smaller than ${half} pairs`);
  if (rope.freqFactors !== undefined && rope.freqFactors.length !== half) {
    throw new Error(`rope freq factors have ${rope.freqFactors.length} entries, expected ${half}`);
  }
  const f = Math.fround;
  const thetaScale = f(Math.pow(rope.freqBase, -2 / rope.dims));
  const cos = new Float32Array(maxPositions * width).fill(1);
  const sin = new Float32Array(maxPositions * width);
  for (let p = 0; p < maxPositions; p++) {
    let theta = f(p);
    for (let i = 0; i < half; i++) {
      const ff = rope.freqFactors?.[i] ?? 1;
      const t = f(rope.freqScale * f(theta / ff));
      cos[p * width + i] = Math.cos(t);
      sin[p * width + i] = Math.sin(t);
      theta = f(theta * thetaScale);
    }
  }
  return { cos, sin };
}

/**
 * Llama 3.1 frequency divisors from the scaling metadata (HF `_compute_llama3_parameters`), for
 * files that state the factors but lack llama.cpp's `rope_freqs.weight`. [dims/2]
 */
export function llama3FreqFactors(dims: number, base: number, factor: number, lowFreqFactor: number, highFreqFactor: number, originalContext: number): Float32Array {
  const out = new Float32Array(dims / 2);
  const lowWavelen = originalContext / lowFreqFactor;
  const highWavelen = originalContext / highFreqFactor;
  for (let i = 0; i < dims / 2; i++) {
    const freq = Math.pow(base, (-2 * i) / dims);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = factor;
    else {
      const smooth = (originalContext / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
      out[i] = freq / ((1 - smooth) * (freq / factor) + smooth * freq);
    }
  }
  return out;
}
