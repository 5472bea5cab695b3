// Test-only: llama.cpp (node-llama-cpp, CPU prebuilt) as the reference Kiwi's runtime is compared
// with. Greedy continuations and next-token probabilities for given token ids.
import { getLlama } from 'node-llama-cpp';
import type { Llama, LlamaModel, Token } from 'node-llama-cpp';

export interface LlamaReference {
  tokenize(text: string): number[];
  bos(): number | undefined;
  eos(): number | undefined;
  /** Greedy continuation of `promptIds`: up to `count` ids, stopping after an end-of-generation token. */
  greedy(promptIds: readonly number[], count: number): Promise<number[]>;
  /** Next-token probabilities (temperature 1, no truncation) after `promptIds`, [vocab]. */
  nextTokenProbabilities(promptIds: readonly number[], vocab: number): Promise<Float64Array>;
  dispose(): Promise<void>;
}

let llamaPromise: Promise<Llama> | undefined;

export async function openLlamaReference(modelPath: string, opts: { threads?: number; contextSize?: number } = {}): Promise<LlamaReference> {
  llamaPromise ??= getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
  const llama = await llamaPromise;
  const model: LlamaModel = await llama.loadModel({ modelPath });
  const context = await model.createContext({ contextSize: opts.contextSize ?? 512, threads: opts.threads ?? 1, sequences: 1 });
  const sequence = context.getSequence();
  return {
    tokenize: (text) => model.tokenize(text).map(Number),
    bos: () => (model.tokens.bos === null ? undefined : Number(model.tokens.bos)),
    eos: () => (model.tokens.eos === null ? undefined : Number(model.tokens.eos)),
    async greedy(promptIds, count) {
      await sequence.clearHistory();
      const out: number[] = [];
      for await (const t of sequence.evaluate(promptIds.map((i) => i as Token), { temperature: 0 })) {
        out.push(Number(t));
        if (out.length >= count || model.isEogToken(t)) break;
      }
      return out;
    },
    async nextTokenProbabilities(promptIds, vocab) {
      await sequence.clearHistory();
      const probs = new Float64Array(vocab);
      for await (const r of sequence.evaluateWithMetadata(promptIds.map((i) => i as Token), { probabilities: true }, { temperature: 1, topK: vocab, topP: 1, minP: 0 })) {
        for (const [id, p] of r.probabilities) probs[Number(id)] = p;
        break;
      }
      return probs;
    },
    async dispose() {
      await context.dispose();
      await model.dispose();
    },
  };
}
