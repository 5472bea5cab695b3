// `kiwi host`: opens a session and prints its code, then who joins, leaves and is evicted, and the
// ring links as they come up. With --model it also plans the ring over the members, assigns their
// layers, and serves the OpenAI-compatible API through the ring (engine/pipeline/session-host.ts).
// Text lines on stdin: `approve FINGERPRINT`, `reject FINGERPRINT` (without --auto-approve; a
// member id or a name nobody else has work too), `status`.
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { isKiwiError, KiwiError } from '../engine/errors.js';
import { join } from 'node:path';
import { kiwiCacheDir } from '../engine/paths.js';
import { progressText } from '../engine/progress-rate.js';
import { layerRangeText } from '../../common/ring-layout.js';
import { SessionHost } from '../engine/pipeline/session-host.js';
import { ShardCache } from '../engine/runtime/shard-cache.js';
import { startControlApi, type ControlApi } from '../engine/server/control-api.js';
import { SessionControl } from '../engine/server/control-api-source.js';
import { removeControlFile, writeControlFile } from '../engine/server/control-file.js';
import { startOpenAiServer, type OpenAiServer } from '../engine/server/http-server.js';
import { resolveChatTemplate } from '../engine/server/chat-template-names.js';
import { formatRequestLog, type RequestLogEntry } from '../engine/server/openai-api.js';
import { hostedRing, ringModelOptions } from '../engine/hosting/ring-control.js';
import { createHost } from '../engine/session/host.js';
import { DEFAULT_WIRE_POLICY, parseWirePolicy, type WirePolicy } from '../engine/pipeline/link-wire.js';
import type { SessionHostOptions, StageStatus } from '../engine/pipeline/session-host.js';
import { deviceFromCapabilities } from '../engine/pipeline/session-fleet.js';
import { API_BROWSER_OPTIONS, apiBrowserPolicy, warnIfUnprotected } from './api-flags.js';
import { readCapabilities } from './capabilities-file.js';
import { flowCapabilities } from '../engine/device/flow-capabilities.js';
import { booleanOption, defineCommand, stringOption, type CommandContext } from './command.js';
import { resolveModelArg } from './model-arg.js';
import { intOption } from './rendezvous.js';
import { parseIceServers } from '../engine/transport/ice-servers.js';
import { eventPrinter, untilStopped } from './session-io.js';
import { PROVIDER_OPTION, resolveProviderFlag } from './provider-flag.js';
import { parseProviderChoice, type StageProvider } from '../engine/device/execution-providers.js';

export const hostCommand = defineCommand({
  name: 'host',
  summary: 'Start a session: print its code and admit the members who join with it',
  description:
    'Without --rendezvous the host runs its own rendezvous (shown next to the code; members pass it with ' +
    '--rendezvous). Without --auto-approve each member waits until you type `approve FINGERPRINT` (or `reject FINGERPRINT`): ' +
      'the fingerprint (xxxx-xxxx) is shown here and on the member\'s screen; a name works only while no other member has it. ' +
    'Type `status` for the members, their state, addresses, links (direct or relayed) and round-trip times.',
  positionals: [],
  options: {
    model: { type: 'string', valueName: 'M', description: 'Model the session will serve (GGUF file)' },
    'model-url': {
      type: 'string', valueName: 'URL',
      description: 'Where the model is published (http/https): without --model the host downloads it into the cache (once); members without a copy fetch just their tensors from it with range requests, else from the host',
    },
    'model-sha256': { type: 'string', valueName: 'HEX', description: 'With --model-url (and no --model): the file\'s expected sha256, checked before it is used' },
    port: { type: 'string', valueName: 'P', description: 'Port of the OpenAI-compatible API once serving', default: '8080' },
    rendezvous: { type: 'string', valueName: 'URL', description: 'Use this rendezvous instead of an embedded one' },
    'rendezvous-host': { type: 'string', valueName: 'ADDR', description: 'Address of the embedded rendezvous (beyond loopback it is announced on the LAN)', default: '0.0.0.0' },
    'rendezvous-port': { type: 'string', valueName: 'P', description: 'Port of the embedded rendezvous (0: any free port)', default: '0' },
    'auto-approve': { type: 'boolean', description: 'Admit everyone who knows the code without asking' },
    expect: { type: 'string', valueName: 'N', description: 'Report when N members have joined; with --model, plan the ring then (else after --settle-ms)' },
    listen: { type: 'string', valueName: 'ADDR', description: 'Address for direct ring links', default: '0.0.0.0' },
    capabilities: { type: 'string', valueName: 'FILE', description: 'This machine\'s device summary for the planner (the output of `kiwi bench --json`; default: its RAM)' },
    'relay-only': { type: 'boolean', description: 'Accept no direct links; everything goes through the rendezvous' },
    'no-ice': { type: 'boolean', description: 'No ICE (UDP, WebRTC data channel) ring links: only WebSocket direct links and the relay' },
    stun: { type: 'string', valueName: 'URLS', description: 'STUN servers for ICE links, comma-separated stun:HOST:PORT (in addition to the rendezvous\'s own)' },
    turn: { type: 'string', valueName: 'URLS', description: 'TURN servers for ICE links, comma-separated turn:USER:PASSWORD@HOST:PORT' },
    'heartbeat-timeout': { type: 'string', valueName: 'S', description: 'Seconds of silence after which a member leaves the ring and the ring is re-planned (default 15); a member is forgotten after 8 times as long, at least 120 s' },
    'recovery-timeout': { type: 'string', valueName: 'S', description: 'Seconds requests wait for enough members to hold the model again before they fail (default 120)' },
    'soft-evict-ms': { type: 'string', valueName: 'MS', description: '--heartbeat-timeout in ms (default 15000)' },
    'hard-evict-ms': { type: 'string', valueName: 'MS', description: 'Silence after which a member is forgotten (default 8 x the heartbeat timeout, at least 120000)' },
    'settle-ms': { type: 'string', valueName: 'MS', description: 'Without --expect: plan once members stopped joining for this long', default: '3000' },
    context: { type: 'string', valueName: 'N', description: 'Positions per request (prompt + completion); default the model\'s, at most 4096' },
    activations: {
      type: 'string', valueName: 'ENC',
      description: 'How hidden states travel between stages: exact (f32, the same tokens as one machine), auto (per link, the cheapest of f32, f16 and int8 for that link\'s speed; may change tokens), or always f32, f16 or int8',
      default: DEFAULT_WIRE_POLICY.activations,
    },
    zstd: { type: 'string', valueName: 'auto|on|off', description: 'Compress activations with zstd: auto (per link, where it saves time), on or off; default auto with --activations auto, else off' },
    lan: { type: 'boolean', description: 'Let the API listen on all interfaces (set an API key)' },
    'api-key': { type: 'string', valueName: 'KEY', description: 'Require Authorization: Bearer KEY on every /v1 request (or $KIWI_API_KEY)' },
    ...API_BROWSER_OPTIONS,
    parallel: { type: 'string', valueName: 'N', description: 'Requests generated at once', default: '8' },
    'max-queue': { type: 'string', valueName: 'N', description: 'Requests that may wait for a slot; more get HTTP 429', default: '64' },
    threads: { type: 'string', valueName: 'N', description: 'CPU threads for the host\'s own stages (default: all cores)' },
    provider: { ...PROVIDER_OPTION, description: `${PROVIDER_OPTION.description} (with --model: the host's own stages)` },
    'no-bench': { type: 'boolean', description: 'Do not measure this device: without --capabilities the planner sees only its RAM (memory tier)' },
    'no-shard-cache': { type: 'boolean', description: 'Build stage graphs in memory instead of using the shard cache' },
    'chat-template': {
      type: 'string',
      valueName: 'FILE|NAME',
      description: "Use this Jinja chat template instead of the model's: a file, or chatml, llama3, gemma, mistral or plain",
    },
    'log-requests': { type: 'boolean', description: 'Print one line per API request: method, path, status, milliseconds, tokens' },
    'ui-port': { type: 'string', valueName: 'P', description: 'Also serve the desktop UI (members, plan, ring) on 127.0.0.1:P (0: any free port); prints its address with the token' },
    json: { type: 'boolean', description: 'Print one JSON object per event' },
  },
  async run(ctx) {
    const json = booleanOption(ctx, 'json');
    const print = eventPrinter(ctx.stdout, json);
    const expectCount = stringOption(ctx, 'expect') !== undefined ? intOption(stringOption(ctx, 'expect') as string, 'expect', 1, 1000) : undefined;
    // Checked before anything starts, so a typo fails before a code is shown.
    const { softEvictMs, hardEvictMs } = evictionTimes(ctx);
    const ringFlags = ringFlagOptions(ctx);
    const modelUrl = stringOption(ctx, 'model-url');
    if (modelUrl !== undefined && !/^https?:\/\/./.test(modelUrl)) throw new KiwiError('USAGE', `--model-url must be an http:// or https:// URL, got '${modelUrl}'`);
    let model = stringOption(ctx, 'model');
    const modelSha256 = stringOption(ctx, 'model-sha256');
    if (modelSha256 !== undefined && (model !== undefined || modelUrl === undefined)) throw new KiwiError('USAGE', '--model-sha256 checks the download of --model-url: give it with --model-url and without --model');
    // The one cache path and checks for a model URL (engine/hosting/model-fetch.ts), as the app and `kiwi serve --model URL`.
    if (model === undefined && modelUrl !== undefined) model = (await resolveModelArg(modelUrl, { useDefault: false, sha256: modelSha256, print, signal: ctx.signal, flag: '--model-url' })).path;
    if (model !== undefined) {
      // Checked now so that a typo fails before friends start joining.
      const isFile = await stat(model).then((st) => st.isFile(), () => false);
      if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${model} does not exist. Pass the path of a GGUF file.`);
    }
    // With a model, before the code is shown: an explicit --provider that cannot run fails here.
    if (model === undefined) parseProviderChoice(stringOption(ctx, 'provider'));
    const provider = model !== undefined ? await resolveProviderFlag(ctx, print) : undefined;
    const rendezvousUrl = stringOption(ctx, 'rendezvous');
    const host = await createHost({
      ...(rendezvousUrl !== undefined ? { rendezvousUrl } : {}),
      embeddedRendezvous: {
        host: stringOption(ctx, 'rendezvous-host') ?? '0.0.0.0',
        port: intOption(stringOption(ctx, 'rendezvous-port') ?? '0', 'rendezvous-port', 0, 65535),
      },
      autoApprove: booleanOption(ctx, 'auto-approve'),
      softEvictMs,
      hardEvictMs,
      ...(booleanOption(ctx, 'relay-only') ? {} : { listenHost: stringOption(ctx, 'listen') ?? '0.0.0.0' }),
      ice: booleanOption(ctx, 'no-ice') ? false : { iceServers: parseIceServers(stringOption(ctx, 'stun'), stringOption(ctx, 'turn')) },
    });
    print('session', { code: host.code, nameplate: host.nameplate, rendezvous: host.rendezvousUrl, model: model ?? null },
      `Session code: ${host.code}\nMembers join with: kiwi join ${host.code} --rendezvous ${host.rendezvousUrl}`);
    let ring: SessionHost | undefined;
    let server: OpenAiServer | undefined;
    if (model !== undefined) {
      try {
        ({ ring, server } = await startRing(ctx, model, host, expectCount, { ...ringFlags, ...(provider !== undefined ? { provider } : {}) }, print));
      } catch (err) {
        await host.close();
        throw err;
      }
    }
    // The control API on loopback, always: the UI (--ui-port) and `kiwi status` (token in a 0600 file).
    const uiPortText = stringOption(ctx, 'ui-port');
    let ui: { control: SessionControl; api: ControlApi; tokenFile: string } | undefined;
    {
      const port = uiPortText !== undefined ? intOption(uiPortText, 'ui-port', 0, 65535) : 0;
      const control = new SessionControl();
      // Leave in the UI ends the session; the shutdown below then closes the ring and the API.
      const close = (): Promise<void> => host.close('the host left from its UI');
      control.attachHost(ring !== undefined && model !== undefined
        ? hostedRing(ring, { model, server: server ?? null, close })
        : { session: host, model: null, serving: null, close });
      const api = await startControlApi({ source: control, port });
      const tokenFile = await writeControlFile({ url: api.url, token: api.token, role: 'host' });
      ui = { control, api, tokenFile };
      print('control', { api_url: api.url, token_file: tokenFile }, `Status: kiwi status (control API ${api.url}, token in ${tokenFile})`);
      if (uiPortText !== undefined) print('ui', { url: api.uiUrl, api_url: api.url }, `Desktop UI: ${api.uiUrl}`);
    }
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
    const ended = new Promise<string>((resolve) => host.once('closed', resolve));

    const rl = createInterface({ input: process.stdin, terminal: false });
    rl.on('line', (line) => {
      const [verb, ...rest] = line.trim().split(/\s+/);
      const who = rest.join(' ');
      try {
        if (verb === 'status') {
          const status = ring !== undefined ? { ...ring.status() } : { ...host.status() };
          print('status', status, JSON.stringify(status, null, 2));
        }
        else if (verb === 'approve' || verb === 'reject') {
          // By fingerprint or id; a name only when no other member has it (an impostor may copy a name).
          const m = host.findMember(who);
          host.decide(m.memberId, verb === 'approve');
        } else if (verb !== '' && verb !== undefined) {
          throw new KiwiError('USAGE', `unknown input '${verb}': use approve FINGERPRINT, reject FINGERPRINT or status`);
        }
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        print('error', { code: err.code, message: err.message }, `error: ${err.message}`);
      }
    });
    await untilStopped(ctx.signal, ended);
    rl.close();
    if (ui !== undefined) {
      await removeControlFile(ui.tokenFile);
      await ui.control.close();
      await ui.api.close();
    }
    await server?.close();
    if (ring !== undefined) await ring.close();
    else await host.close();
    return 0;
  },
});

type Ctx = Parameters<typeof hostCommand.run>[0];

const SECONDS_MAX = 86_400;
const HARD_EVICT_DEFAULT_MS = 120_000;

/** A whole or fractional number of seconds from a flag, as ms. */
export function secondsOption(text: string, name: string, min: number, max: number): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < min || value > max) {
    throw new KiwiError('USAGE', `--${name} must be a number of seconds from ${min} to ${max}, got '${text}'`);
  }
  return Math.round(value * 1000);
}

/**
 * --heartbeat-timeout (s) or --soft-evict-ms: when a silent member leaves the ring; --hard-evict-ms:
 * when it is forgotten, by default 8 times the soft timeout and at least the old 120 s, so a
 * member may come back long after the ring went on without it.
 */
export function evictionTimes(ctx: CommandContext): { softEvictMs: number; hardEvictMs: number } {
  const heartbeat = stringOption(ctx, 'heartbeat-timeout');
  const softText = stringOption(ctx, 'soft-evict-ms');
  if (heartbeat !== undefined && softText !== undefined) {
    throw new KiwiError('USAGE', 'Use --heartbeat-timeout or --soft-evict-ms, not both');
  }
  const softEvictMs = heartbeat !== undefined
    ? secondsOption(heartbeat, 'heartbeat-timeout', 0.01, SECONDS_MAX)
    : intOption(softText ?? '15000', 'soft-evict-ms', 1, 86_400_000);
  const hardText = stringOption(ctx, 'hard-evict-ms');
  const hardEvictMs = hardText !== undefined
    ? intOption(hardText, 'hard-evict-ms', 2, 86_400_000)
    : Math.max(HARD_EVICT_DEFAULT_MS, 8 * softEvictMs);
  if (hardEvictMs <= softEvictMs) throw new KiwiError('USAGE', '--hard-evict-ms must be longer than the heartbeat timeout (--soft-evict-ms)');
  return { softEvictMs, hardEvictMs };
}

/** What `kiwi host` adds to SessionHostOptions beyond the model: --activations/--zstd and --recovery-timeout. */
export interface RingFlagOptions {
  wirePolicy: WirePolicy;
  recoveryTimeoutMs?: number;
}

export function ringFlagOptions(ctx: CommandContext): RingFlagOptions {
  const wirePolicy = parseWirePolicy(stringOption(ctx, 'activations'), stringOption(ctx, 'zstd'));
  const recovery = stringOption(ctx, 'recovery-timeout');
  return { wirePolicy, ...(recovery !== undefined ? { recoveryTimeoutMs: secondsOption(recovery, 'recovery-timeout', 0, SECONDS_MAX) } : {}) };
}

/** Starts the API (503 until the ring serves) and forms the ring in the background. */
async function startRing(ctx: Ctx, model: string, host: Awaited<ReturnType<typeof createHost>>, expect: number | undefined, flags: RingFlagOptions & { provider?: StageProvider }, print: ReturnType<typeof eventPrinter>): Promise<{ ring: SessionHost; server: OpenAiServer }> {
  const contextText = stringOption(ctx, 'context');
  const threadsText = stringOption(ctx, 'threads');
  const parallel = intOption(stringOption(ctx, 'parallel') ?? '8', 'parallel', 1, 256);
  const options: SessionHostOptions = {
    ...(await ringModelOptions(model)),
    ...(await hostDeviceOption(ctx, print)),
    ...(stringOption(ctx, 'model-url') !== undefined ? { modelUrl: stringOption(ctx, 'model-url') } : {}),
    session: {},
    ...(expect !== undefined ? { expect } : {}),
    settleMs: intOption(stringOption(ctx, 'settle-ms') ?? '3000', 'settle-ms', 0, 3_600_000),
    ...flags,
    maxPositions: contextText !== undefined ? intOption(contextText, 'context', 2, 1_048_576) : 4096,
    maxBatch: parallel,
    ...(threadsText !== undefined ? { threads: intOption(threadsText, 'threads', 1, 1024) } : {}),
    ...(booleanOption(ctx, 'no-shard-cache') ? {} : { cache: new ShardCache(join(kiwiCacheDir(), 'shards')) }),
  };
  const ring = new SessionHost(host, options);
  const templateOption = stringOption(ctx, 'chat-template');
  if (templateOption !== undefined) ring.backend.chatTemplateOverride = resolveChatTemplate(templateOption);
  const lan = booleanOption(ctx, 'lan');
  const apiKey = stringOption(ctx, 'api-key') ?? (process.env.KIWI_API_KEY || undefined);
  const apiHost = lan ? '0.0.0.0' : '127.0.0.1';
  const server = await startOpenAiServer(ring.backend, {
    host: apiHost,
    ...apiBrowserPolicy(ctx),
    port: intOption(stringOption(ctx, 'port') ?? '8080', 'port', 0, 65535),
    maxActive: parallel,
    maxQueue: intOption(stringOption(ctx, 'max-queue') ?? '64', 'max-queue', 0, 100_000),
    ...(apiKey !== undefined ? { apiKey } : {}),
    onError: (err) => ctx.stderr.write(`kiwi host: request failed: ${(err as Error)?.stack ?? String(err)}\n`),
    ...(booleanOption(ctx, 'log-requests') ? { onRequestDone: (e: RequestLogEntry) => print('request', { ...e, ms: Math.round(e.ms) }, formatRequestLog(e)) } : {}),
  });
  warnIfUnprotected(print, ctx.stderr, 'host', apiHost, apiKey);
  ring.on('plan', (plan) => print('plan', { ...plan }, `plan: ${plan.stages.map((s) => `${s.device} ${layerRangeText(s.start, s.end)}${s.head ? ' + head' : ''}`).join(' → ')}`));
  ring.on('assigned', (s) => print('assigned', { peer: s.peer, name: s.name, start: s.start, end: s.end, head: s.head }, `${s.name} takes ${layerRangeText(s.start, s.end)}`));
  ring.on('weights-progress', (p) => print.progress('weights-progress', p.name, {
    name: p.name, received_bytes: p.receivedBytes, total_bytes: p.totalBytes, bytes_per_s: p.bytesPerSecond, eta_s: p.etaSeconds, final: p.final,
  }, `${p.name}: weights ${progressText({ done: p.receivedBytes, total: p.totalBytes, rate: p.bytesPerSecond, etaSeconds: p.etaSeconds, final: p.final })}`, p.final));
  // `wire`: how this stage encodes what it sends to the next one (chosen per link by --activations/--zstd).
  const wireName = (w: StageStatus['wire']): string | null => (w === undefined ? null : `${w.encoding}${w.zstd ? '+zstd' : ''}`);
  ring.on('ready', (s) => print('stage-ready', { peer: s.peer, name: s.name, start: s.start, end: s.end, source: s.source ?? null, transferred_bytes: s.transferredBytes ?? 0, wire: wireName(s.wire) },
    `${s.name} is ready (${layerRangeText(s.start, s.end)}${s.wire !== undefined ? `, sends ${wireName(s.wire)}` : ''})`));
  ring.on('serving', () => print('serving', { url: server.url }, `Serving the OpenAI-compatible API at ${server.url}`));
  ring.on('error', (err) => print('error', { code: err.code, message: err.message }, `error: ${err.message}`));
  ring.on('warning', (err) => print('warning', { code: err.code, message: err.message, ...(typeof err.details.member === 'string' ? { member: err.details.member } : {}) }, `warning: ${err.message}`));
  ring.on('recovering', (reason) => print('recovering', { reason }, `re-planning the ring: ${reason}`));
  ring.on('waiting', (reason) => print('waiting', { reason }, reason));
  ring.on('recovered', (r) => print('recovered', { epoch: r.epoch, reason: r.reason, duration_ms: r.durationMs, bytes_moved: r.bytesMoved, resumed_requests: r.resumedRequests }, `the ring recovered in ${r.durationMs} ms (epoch ${r.epoch}, ${r.resumedRequests} requests resumed, ${r.bytesMoved} bytes moved)`));
  ring.form(ctx.signal).catch((err: unknown) => {
    // form() already reported a KiwiError as an error event; stopping (Ctrl-C) aborts it; anything else is a bug.
    if (!isKiwiError(err) && !ctx.signal.aborted) throw err;
  });
  return { ring, server };
}

/**
 * The host as the planner sees it: its --capabilities file, else its device bench (cached per
 * hardware), else with --no-bench ringModelOptions' stand-in (all its RAM, memory tier).
 */
async function hostDeviceOption(ctx: Ctx, print: ReturnType<typeof eventPrinter>): Promise<Pick<SessionHostOptions, 'hostDevice'> | Record<string, never>> {
  const file = stringOption(ctx, 'capabilities');
  const caps = await flowCapabilities({
    ...(file !== undefined ? { file: await readCapabilities(file) } : {}),
    bench: !booleanOption(ctx, 'no-bench'),
    onProgress: (message) => print('bench-progress', { message }, `measuring this device: ${message}`),
    signal: ctx.signal,
  });
  if (caps === undefined) return {};
  const hostDevice = deviceFromCapabilities(caps);
  if (hostDevice === undefined) throw new KiwiError('USAGE', `${file ?? 'the device bench'} has no device summary (fleet_device with memory_bytes); use the output of 'kiwi bench --json'.`);
  return { hostDevice };
}
