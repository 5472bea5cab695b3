// A headless Kiwi for the e2e tests (run with tsx): the control API and the UI on loopback over a
// SessionControl that can host (the ring of `kiwi host --model`: a host node, served on /v1
// once its members loaded their layers) or join (taking part in the ring), with short eviction
// timeouts and a small device benchmark so a test sees changes within seconds.
// Prints one JSON line: {"event":"ui","ui_url","api_url","token"}; runs until SIGTERM/SIGINT.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runDeviceBench } from '../../electron/engine/device/device-bench.js';
import { createAppControl } from '../../electron/engine/hosting/app-control.js';

const { values } = parseArgs({
  options: {
    'api-port': { type: 'string', default: '0' },
    name: { type: 'string' },
    'soft-evict-ms': { type: 'string', default: '2500' },
    'heartbeat-ms': { type: 'string', default: '400' },
    /** Hosting: plan the ring once this many members are active (else once they stop joining for 3 s). */
    expect: { type: 'string' },
    /** Hosting: the memory (bytes) the planner counts for this machine and for members that report no device. */
    'device-memory': { type: 'string' },
    /** Where the device benchmark caches; the caller removes it (a test kills this process with SIGKILL). */
    'bench-cache': { type: 'string' },
  },
});

const ownBenchDir = values['bench-cache'] === undefined;
const benchDir = values['bench-cache'] ?? (await mkdtemp(join(tmpdir(), 'kiwi-e2e-bench-')));
// The app's composition (engine/hosting/app-control.ts, as electron/main.ts); models given by URL
// land in $KIWI_CACHE_DIR's models/ (the test points it at a scratch folder), a request naming no
// model hosts models/stories260K.gguf of this checkout.
const { api, close } = await createAppControl({
  session: { softEvictMs: Number(values['soft-evict-ms']), hardEvictMs: 120_000, listenHost: '127.0.0.1' },
  api: { port: Number(values['api-port']) },
  ring: {
    maxPositions: 256,
    // The recoveries these tests count are the faults they cause; a drift re-plan on a loaded machine is not one.
    drift: false,
    ...(values.expect !== undefined ? { expect: Number(values.expect) } : {}),
    ...(values['device-memory'] !== undefined ? { hostDevice: { memoryBytes: Number(values['device-memory']) } } : {}),
  },
  member: { weightsDir: join(benchDir, 'weights') },
  runBench: (onProgress, signal) =>
    runDeviceBench({ cacheDir: benchDir, refresh: true, onProgress, signal, bandwidth: { threads: 1, bytesPerThread: 32 * 1024 * 1024, rounds: 8, passesPerRound: 1 } }),
  join: { listenHost: '127.0.0.1', heartbeatMs: Number(values['heartbeat-ms']), reconnectDelayMs: 300, ...(values.name !== undefined ? { name: values.name } : {}) },
  onError: (where, err) => process.stderr.write(where === 'host' ? `headless host: the ring failed: ${err.message}\n` : `headless member: ${err.message}\n`),
});
process.stdout.write(`${JSON.stringify({ event: 'ui', ui_url: api.uiUrl, api_url: api.url, token: api.token })}\n`);

let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await close();
  if (ownBenchDir) await rm(benchDir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
