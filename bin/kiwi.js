#!/usr/bin/env node
// Entry point of the `kiwi` command: runs the compiled CLI (built by `npm install` via `prepare`).
import { main } from '../dist/electron/cli.js';

process.exitCode = await main(process.argv.slice(2));
