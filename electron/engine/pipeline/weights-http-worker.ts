// The worker thread of weights-http.ts: the range server (weights-http-serve.ts) on its own event
// loop, so the host's stage builds and ring steps never hold up a member's transfer (nor the
// transfer them). workerData: { modelPath, fileBytes, host, port }; grants come as messages.
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { applyToTable, GrantTable, rangeServer, type FromWorker, type ToWorker } from './weights-http-serve.js';

const port = parentPort;
if (port === null) throw new Error('weights-http-worker.ts runs as a worker thread');
const { modelPath, fileBytes, host, port: listenPort } = workerData as { modelPath: string; fileBytes: number; host: string; port: number };
const table = new GrantTable();
const server = rangeServer(modelPath, fileBytes, table);
const answer = (msg: FromWorker): void => port.postMessage(msg);
server.once('error', (err) => answer({ type: 'failed', message: err.message }));
server.listen(listenPort, host, () => answer({ type: 'listening', port: (server.address() as AddressInfo).port }));
port.on('message', (msg: ToWorker) => {
  if (msg.type === 'close') {
    server.close(() => answer({ type: 'done', seq: msg.seq }));
    server.closeAllConnections();
    return;
  }
  applyToTable(table, msg);
  answer({ type: 'done', seq: msg.seq });
});
