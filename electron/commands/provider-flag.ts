// `--provider auto|cuda|dml|cpu` of `kiwi join` and `kiwi host`: resolved once at start (the probe
// graph in engine/device/execution-providers.ts), printed as a `provider` event with the reason for
// each GPU provider auto passed over, and handed to the stages this machine runs.
import { parseProviderChoice, selectProvider, type StageProvider } from '../engine/device/execution-providers.js';
import { stringOption, type CommandContext, type OptionSpec } from './command.js';
import type { EventPrinter } from './session-io.js';

export const PROVIDER_OPTION: OptionSpec = {
  type: 'string',
  valueName: 'EP',
  description: 'Execution provider of this machine\'s stages: auto (the GPU one whose library is installed and that runs a probe graph, else cpu), cuda, dml or cpu',
  default: 'auto',
};

/** The provider for this machine's stages; an explicit GPU provider that cannot run throws PROVIDER_UNAVAILABLE. */
export async function resolveProviderFlag(ctx: CommandContext, print: EventPrinter): Promise<StageProvider> {
  const requested = parseProviderChoice(stringOption(ctx, 'provider'));
  const { provider, fallbacks } = await selectProvider(requested);
  print('provider', { provider, requested, fallbacks },
    `execution provider: ${provider}${fallbacks.length > 0 ? ` (${fallbacks.join('; ')})` : ''}`);
  return provider;
}
