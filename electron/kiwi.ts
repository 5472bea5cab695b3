// The `kiwi` process: restarts itself once with huge pages where that applies (device/huge-pages.ts,
// before the command is even loaded), turns Ctrl-C / SIGTERM into the command's AbortSignal
// (commands clean up: partial files, sockets, sessions) and sets the exit code. A second Ctrl-C
// exits at once. bin/kiwi.js runs the compiled copy; tests run this file from source with tsx.
import { restartWithHugePages } from './engine/device/huge-pages.js';

restartWithHugePages();
const { main } = await import('./cli.js');

const controller = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort();
  });
}
process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, signal: controller.signal });
