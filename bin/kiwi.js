#!/usr/bin/env node
// Entry point of the `kiwi` command: runs the compiled CLI (built by `npm install` via `prepare`).
// Ctrl-C / SIGTERM abort the running command (it cleans up: partial files, sockets, sessions);
// a second Ctrl-C exits at once.
import { main } from '../dist/electron/cli.js';

const controller = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort();
  });
}
process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, signal: controller.signal });
