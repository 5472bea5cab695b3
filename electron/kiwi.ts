// The `kiwi` process: restarts itself once with huge pages where that applies (device/huge-pages.ts;
// before the command is even loaded, and only for the commands that open stages,
// commands/stage-commands.ts), turns Ctrl-C / SIGTERM into the command's AbortSignal (commands clean
// up: partial files, sockets, sessions) and sets the exit code. A second Ctrl-C exits at once; so
// does a process still held open 3 s after its command ended. bin/kiwi.js runs the compiled copy;
// tests run this file from source with tsx.
import { opensStages } from './commands/stage-commands.js';
import { restartWithHugePages } from './engine/device/huge-pages.js';

if (opensStages(process.argv[2])) restartWithHugePages();
const { main } = await import('./cli.js');

const controller = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort();
  });
}
process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, signal: controller.signal });
// The command closed what it opened. Whatever still holds the event loop after that (a native
// library's thread, a straggling socket) must not keep the process alive: a member that leaves
// exits, or its friends' rings and a script waiting on it hang. Says what it was, for a bug report.
const EXIT_GRACE_MS = 3000;
setTimeout(() => {
  process.stderr.write(`kiwi: the command ended ${EXIT_GRACE_MS / 1000} s ago but ${process.getActiveResourcesInfo().join(', ') || 'a native handle'} still held the process; exiting\n`);
  process.exit();
}, EXIT_GRACE_MS).unref();
