// The `kiwi` commands that open model stages (onnxruntime sessions whose packed weights huge pages
// speed up): only these restart the process with huge pages (kiwi.ts, device/huge-pages.ts); the
// others (inspect, plan, status, ...) start at once. Imports nothing: kiwi.ts reads it before
// anything else is loaded.
export const STAGE_COMMANDS: readonly string[] = ['generate', 'serve', 'bench', 'host', 'join'];

/** Whether `kiwi <command>` opens model stages. */
export const opensStages = (command: string | undefined): boolean => command !== undefined && STAGE_COMMANDS.includes(command);
