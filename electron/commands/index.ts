// Every `kiwi` subcommand, in the order `kiwi --help` lists them.
import type { Command } from './command.js';
import { benchCommand } from './bench.js';
import { generateCommand } from './generate.js';
import { hostCommand } from './host.js';
import { inspectCommand } from './inspect.js';
import { joinCommand } from './join.js';
import { planCommand } from './plan.js';
import { rendezvousCommand } from './rendezvous.js';
import { serveCommand } from './serve.js';
import { statusCommand } from './status.js';
import { synthCommand } from './synth.js';
import { tokenizeCommand } from './tokenize.js';

export const commands: Command[] = [inspectCommand, tokenizeCommand, generateCommand, serveCommand, benchCommand, planCommand, synthCommand, rendezvousCommand, hostCommand, joinCommand, statusCommand];
