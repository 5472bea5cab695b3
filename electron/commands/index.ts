// Every `kiwi` subcommand, in the order `kiwi --help` lists them.
import type { Command } from './command.js';

export const commands: Command[] = [];
