// `--weight-layout exact|fast` of `kiwi serve`, `kiwi generate` and `kiwi host`: how the model's
// matrices are laid out for onnxruntime (engine/runtime/weights/convert.ts). A ring's stages share
// the host's (its members get it with their assignment, ring-protocol.ts Assign.layout), or a
// re-plan that moves a layer would change a stream's tokens.
import { KiwiError } from '../engine/errors.js';
import { WEIGHT_LAYOUTS, type WeightLayout } from '../engine/runtime/weights/convert.js';
import { stringOption, type CommandContext, type OptionSpec } from './command.js';

export const WEIGHT_LAYOUT_OPTION: OptionSpec = {
  type: 'string',
  valueName: 'exact|fast',
  description: "How the weights are laid out: exact (the GGUF's own blocks, bit for bit) or fast (Q4_0 requantized to blocks of 128: faster decode, lossy; bench/single-node.ts prints its agreement with llama.cpp)",
  default: 'exact',
};

export function weightLayoutFlag(ctx: CommandContext): WeightLayout {
  const value = stringOption(ctx, 'weight-layout') ?? 'exact';
  if (!(WEIGHT_LAYOUTS as readonly string[]).includes(value)) throw new KiwiError('USAGE', `--weight-layout must be one of ${WEIGHT_LAYOUTS.join(', ')}, got '${value}'`);
  return value as WeightLayout;
}
