// What `kiwi host` prints as its session and ring go: who joins, leaves and is evicted, the ring
// links as they come up, then the plan, each stage's assignment, weights and readiness, serving,
// re-plans and recoveries (one JSON object per event with --json, else a line of text).
import { layerRangeText } from '../../common/ring-layout.js';
import type { SessionHost, StageStatus } from '../engine/pipeline/session-host.js';
import { progressText } from '../engine/progress-rate.js';
import type { OpenAiServer } from '../engine/server/http-server.js';
import type { HostSession } from '../engine/session/host.js';
import type { EventPrinter } from './session-io.js';

/** The session's events; `expectCount`: say so once that many members joined. */
export function printSessionEvents(host: HostSession, print: EventPrinter, expectCount: number | undefined): void {
  let joined = 0;
  host.on('change', (c) => {
    switch (c.type) {
      case 'member-pending':
        print('member-pending', { name: c.name, member_id: c.memberId, fingerprint: c.fingerprint },
          `${c.name} (fingerprint ${c.fingerprint}) wants to join: check that their screen shows ${c.fingerprint}, then type 'approve ${c.fingerprint}' or 'reject ${c.fingerprint}'`);
        break;
      case 'member-joined':
        print('member-joined', { name: c.name, member_id: c.memberId, fingerprint: c.fingerprint, rejoined: c.rejoined }, `${c.name} (${c.fingerprint}) ${c.rejoined ? 'rejoined' : 'joined'}`);
        if (!c.rejoined && ++joined === expectCount) print('members-ready', { count: joined }, `all ${joined} expected members have joined`);
        break;
      case 'member-recovered':
        print('member-recovered', { name: c.name, member_id: c.memberId }, `${c.name} is back`);
        break;
      case 'member-left':
        print('member-left', { name: c.name, member_id: c.memberId, reason: c.reason }, `${c.name} left (${c.reason})`);
        break;
      case 'member-rejected':
        print('member-rejected', { name: c.name, member_id: c.memberId }, `${c.name} was not admitted`);
        break;
    }
  });
  host.on('pake-failed', (peer, reason) => print('join-failed', { peer, reason }, `a join attempt failed: ${reason}`));
  host.on('pake-locked', (err) => print('pake-locked', { code: err.code, message: err.message }, `warning: ${err.message}`));
  host.on('nameplate-closed', (reason) =>
    print('error', { code: 'NAMEPLATE_CLOSED', message: `The session takes no more members: ${reason}. Restart the host for a new code.` },
      `the session takes no more members: ${reason}`));
  host.on('link', (l) => {
    if (l.state === 'up' && l.rttMs !== undefined) {
      const mbps = l.throughputMBps !== undefined ? Number(l.throughputMBps.toFixed(1)) : null;
      print('link', { a: l.a, b: l.b, kind: l.kind, transport: l.transport ?? null, rtt_ms: Number(l.rttMs.toFixed(3)), throughput_mbps: mbps },
        `link ${l.a}-${l.b} ${l.kind}${l.transport !== undefined ? ` (${l.transport})` : ''}, ${l.rttMs.toFixed(2)} ms${mbps !== null ? `, ${mbps} MB/s` : ''}`);
    } else if (l.state === 'failed') {
      print('link', { a: l.a, b: l.b, state: 'failed', reason: l.error ?? null }, `link ${l.a}-${l.b} failed: ${l.error ?? ''}`);
    }
  });
  host.on('warning', (err) => print('warning', { code: err.code, message: err.message }, `warning: ${err.message}`));
}

/** The ring's events, and once it serves, where. */
export function printRingEvents(ring: SessionHost, server: OpenAiServer, print: EventPrinter): void {
  ring.on('plan', (plan) => print('plan', { ...plan }, `plan: ${plan.stages.map((s) => `${s.device} ${layerRangeText(s.start, s.end)}${s.head ? ' + head' : ''}`).join(' → ')}`));
  ring.on('assigned', (s) => print('assigned', { peer: s.peer, name: s.name, start: s.start, end: s.end, head: s.head }, `${s.name} takes ${layerRangeText(s.start, s.end)}`));
  ring.on('weights-progress', (p) => print.progress('weights-progress', p.name, {
    name: p.name, received_bytes: p.receivedBytes, total_bytes: p.totalBytes, bytes_per_s: p.bytesPerSecond, eta_s: p.etaSeconds, final: p.final,
  }, `${p.name}: weights ${progressText({ done: p.receivedBytes, total: p.totalBytes, rate: p.bytesPerSecond, etaSeconds: p.etaSeconds, final: p.final })}`, p.final));
  // `wire`: how this stage encodes what it sends to the next one (chosen per link by --activations/--zstd).
  const wireName = (w: StageStatus['wire']): string | null => (w === undefined ? null : `${w.encoding}${w.zstd ? '+zstd' : ''}`);
  ring.on('ready', (s) => print('stage-ready', {
    peer: s.peer, name: s.name, start: s.start, end: s.end, source: s.source ?? null, transferred_bytes: s.transferredBytes ?? 0, wire: wireName(s.wire),
    ...(s.loadMs !== undefined ? { load_ms: Math.round(s.loadMs) } : {}), ...(s.segments !== undefined ? { segments: s.segments } : {}), ...(s.openedLayers !== undefined ? { opened_layers: s.openedLayers } : {}),
  },
    `${s.name} is ready (${layerRangeText(s.start, s.end)}${s.wire !== undefined ? `, sends ${wireName(s.wire)}` : ''})`));
  ring.on('serving', () => print('serving', { url: server.url }, `Serving the OpenAI-compatible API at ${server.url}`));
  ring.on('error', (err) => print('error', { code: err.code, message: err.message }, `error: ${err.message}`));
  ring.on('warning', (err) => print('warning', { code: err.code, message: err.message, ...(typeof err.details.member === 'string' ? { member: err.details.member } : {}) }, `warning: ${err.message}`));
  ring.on('recovering', (reason) => print('recovering', { reason }, `re-planning the ring: ${reason}`));
  ring.on('waiting', (reason) => print('waiting', { reason }, reason));
  ring.on('replanned', (r) => print('replanned', {
    reason: r.reason, epoch: r.epoch, stage: r.stage.name, start: r.stage.start, end: r.stage.end,
    predicted_ms: round3(r.stage.predictedMs), measured_ms: round3(r.stage.measuredMs), spread_ms: round3(r.stage.spreadMs), steps: r.steps,
    block_ms: Object.fromEntries(Object.entries(r.blockMs).map(([k, v]) => [k, round3(v)])),
  }, `re-planned (${r.message})`));
  ring.on('recovered', (r) => print('recovered', { epoch: r.epoch, reason: r.reason, duration_ms: r.durationMs, bytes_moved: r.bytesMoved, resumed_requests: r.resumedRequests }, `the ring recovered in ${r.durationMs} ms (epoch ${r.epoch}, ${r.resumedRequests} requests resumed, ${r.bytesMoved} bytes moved)`));
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
