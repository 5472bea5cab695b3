// `kiwi host`: opens a session and prints its code, then who joins, leaves and is evicted, and the
// ring links as they come up. With --model it also plans the ring over the members, assigns their
// layers, and serves the OpenAI-compatible API through the ring. The node is composed in
// engine/hosting/host-node.ts; this file parses the flags and prints (host-events.ts).
// Text lines on stdin: `approve FINGERPRINT`, `reject FINGERPRINT` (without --auto-approve; a
// member id or a name nobody else has work too), `status`.
import { createInterface } from 'node:readline';
import { isKiwiError, KiwiError } from '../engine/errors.js';
import { shardCache } from '../engine/hosting/cache-layout.js';
import type { ControlEndpoint } from '../engine/hosting/control-endpoint.js';
import { checkModelFile, createHostNode, measureHostDevice, type HostModel } from '../engine/hosting/host-node.js';
import { resolveChatTemplate } from '../engine/server/chat-template-names.js';
import { formatRequestLog, type RequestLogEntry } from '../engine/server/openai-api.js';
import { DEFAULT_WIRE_POLICY, parseWirePolicy, type WirePolicy } from '../engine/pipeline/link-wire.js';
import { parseDriftFlag, type DriftOptions } from '../engine/pipeline/stage-drift.js';
import { standbyBudgetBytes } from '../engine/pipeline/standby.js';
import { API_BROWSER_OPTIONS, apiBrowserPolicy, warnIfUnprotected } from './api-flags.js';
import { readCapabilities } from './capabilities-file.js';
import { booleanOption, defineCommand, stringOption, type CommandContext } from './command.js';
import { resolveModelArg } from './model-arg.js';
import { intOption } from './rendezvous.js';
import { parseIceServers } from '../engine/transport/ice-servers.js';
import { printRingEvents, printSessionEvents } from './host-events.js';
import { eventPrinter, untilStopped, type EventPrinter } from './session-io.js';
import { PROVIDER_OPTION, resolveProviderFlag } from './provider-flag.js';
import { parseProviderChoice, type StageProvider } from '../engine/device/execution-providers.js';
import { parseSpeculative, withVerify } from '../engine/runtime/speculative.js';
import { WEIGHT_LAYOUT_OPTION, weightLayoutFlag } from './weight-layout-flag.js';

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
    'weights-http': {
      type: 'string', valueName: 'on|off', default: 'on',
      description: 'Serve members the model\'s byte ranges over HTTP on the --listen address (token-protected, in clear, sha256-checked over the session); off: only through the encrypted session',
    },
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
    'replan-drift': {
      type: 'string', valueName: 'off|PERCENT',
      description: 'Re-plan at a safe point, with measured block times, when a stage\'s measured time per step stays more than PERCENT off its prediction (and beyond its run-to-run spread) over many steps (default 25); off: never',
    },
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
    speculative: { type: 'string', valueName: 'off|auto|K', description: 'Speculative decoding (default off, auto with --draft-model): off, auto (prompt-lookup or draft-model drafts, k adapted to acceptance and step cost, none when they do not pay) or a fixed draft length 1-8; drafts are verified in one trip round the ring' },
    'draft-model': { type: 'string', valueName: 'FILE', description: 'A small GGUF model of the same vocabulary (e.g. Llama-3.2-1B for Llama-3.1-8B) that drafts for speculative decoding (on the host, where the generation loop runs) instead of prompt lookup; output stays the model\'s own, the draft model only guesses' },
    'speculative-verify': { type: 'string', valueName: 'exact|chunk', description: 'How drafts are checked: exact (each position as the decode step that would have made it, bit for bit; one pass where the kernels allow, else one step per position, still one trip round the ring) or chunk (as one prefill chunk: faster on one machine, but a near-tie can flip a token)', default: 'exact' },
    'prompt-cache-mb': { type: 'string', valueName: 'MB', description: 'KV of recent prompts kept on every stage for prompts that start the same way (each stage keeps its layers\' share, planned in its memory; 0: off)', default: '256' },
    'max-queue': { type: 'string', valueName: 'N', description: 'Requests that may wait for a slot; more get HTTP 429', default: '64' },
    threads: { type: 'string', valueName: 'N', description: 'CPU threads for the host\'s own stages (default: all cores)' },
    'weight-layout': { ...WEIGHT_LAYOUT_OPTION, description: `${WEIGHT_LAYOUT_OPTION.description}; every stage of the ring, members' included, uses the host's` },
    provider: { ...PROVIDER_OPTION, description: `${PROVIDER_OPTION.description} (with --model: the host's own stages)` },
    'no-bench': { type: 'boolean', description: 'Do not measure this device: without --capabilities the planner sees only its RAM (memory tier)' },
    'standby-gb': {
      type: 'string', valueName: 'GB',
      description: 'Disk to keep standby layers in: once the ring serves, the layers after the host\'s own are built into the shard cache in the background, so a re-plan that gives the host more layers opens them without converting them',
    },
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
    // Checked now so that a typo fails before friends start joining.
    if (model !== undefined) await checkModelFile(model, 'Pass the path of a GGUF file.');
    // With a model, before the code is shown: an explicit --provider that cannot run fails here.
    if (model === undefined) parseProviderChoice(stringOption(ctx, 'provider'));
    const provider = model !== undefined ? await resolveProviderFlag(ctx, print) : undefined;
    const uiPortText = stringOption(ctx, 'ui-port');
    const rendezvousUrl = stringOption(ctx, 'rendezvous');
    const node = await createHostNode({
      session: {
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
      },
      ...(model !== undefined ? { model: hostModel(ctx, model, expectCount, { ...ringFlags, ...(provider !== undefined ? { provider } : {}) }, print) } : {}),
      onSession: (host) => print('session', { code: host.code, nameplate: host.nameplate, rendezvous: host.rendezvousUrl, model: model ?? null },
        `Session code: ${host.code}\nMembers join with: kiwi join ${host.code} --rendezvous ${host.rendezvousUrl}`),
      onRing: (ring, server) => {
        warnIfUnprotected(print, ctx.stderr, 'host', server.host, stringOption(ctx, 'api-key') ?? (process.env.KIWI_API_KEY || undefined));
        printRingEvents(ring, server, print);
      },
      // The control API on loopback, always: the UI (--ui-port) and `kiwi status` (token in a 0600 file).
      control: { port: uiPortText !== undefined ? intOption(uiPortText, 'ui-port', 0, 65535) : 0 },
      signal: ctx.signal,
    });
    const host = node.session;
    const control = node.control as ControlEndpoint;
    print('control', { api_url: control.api.url, token_file: control.tokenFile }, `Status: kiwi status (control API ${control.api.url}, token in ${control.tokenFile})`);
    if (uiPortText !== undefined) print('ui', { url: control.api.uiUrl, api_url: control.api.url }, `Desktop UI: ${control.api.uiUrl}`);
    printSessionEvents(host, print, expectCount);
    const ended = new Promise<string>((resolve) => host.once('closed', resolve));

    const rl = createInterface({ input: process.stdin, terminal: false });
    rl.on('line', (line) => {
      const [verb, ...rest] = line.trim().split(/\s+/);
      const who = rest.join(' ');
      try {
        if (verb === 'status') {
          const status = { ...node.status() };
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
    await node.close();
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

/** What `kiwi host` adds to SessionHostOptions beyond the model: --activations/--zstd, --recovery-timeout and --replan-drift. */
export interface RingFlagOptions {
  wirePolicy: WirePolicy;
  recoveryTimeoutMs?: number;
  drift?: DriftOptions | false;
}

export function ringFlagOptions(ctx: CommandContext): RingFlagOptions {
  const wirePolicy = parseWirePolicy(stringOption(ctx, 'activations'), stringOption(ctx, 'zstd'));
  const recovery = stringOption(ctx, 'recovery-timeout');
  const drift = stringOption(ctx, 'replan-drift');
  return {
    wirePolicy, ...(drift !== undefined ? { drift: parseDriftFlag(drift) } : {}),
    ...(recovery !== undefined ? { recoveryTimeoutMs: secondsOption(recovery, 'recovery-timeout', 0, SECONDS_MAX) } : {}),
  };
}

/** --weights-http on|off. */
function weightsHttpOption(ctx: Ctx): boolean {
  const v = stringOption(ctx, 'weights-http') ?? 'on';
  if (v !== 'on' && v !== 'off') throw new KiwiError('USAGE', `--weights-http must be on or off, got '${v}'`);
  return v === 'on';
}

/** KIWI_CUT_MIN_MB: a whole number of MiB, or `off` (never split); unset: the default. */
function cutMinOption(value: string | undefined): { cutMinBytes?: number } {
  if (value === undefined) return {};
  if (value === 'off') return { cutMinBytes: Number.POSITIVE_INFINITY };
  if (!/^\d+$/.test(value)) throw new KiwiError('USAGE', `KIWI_CUT_MIN_MB must be a whole number of MiB or off, not '${value}'`);
  return { cutMinBytes: Number(value) * 1024 * 1024 };
}

/** The ring `kiwi host --model` composes (engine/hosting/host-node.ts) and its API, from the flags. */
function hostModel(ctx: Ctx, model: string, expect: number | undefined, flags: RingFlagOptions & { provider?: StageProvider }, print: EventPrinter): HostModel {
  const contextText = stringOption(ctx, 'context');
  const threadsText = stringOption(ctx, 'threads');
  const parallel = intOption(stringOption(ctx, 'parallel') ?? '8', 'parallel', 1, 256);
  const modelUrl = stringOption(ctx, 'model-url');
  const draftModel = stringOption(ctx, 'draft-model');
  const standbyBytes = standbyBudgetBytes(stringOption(ctx, 'standby-gb'), '--standby-gb');
  const templateOption = stringOption(ctx, 'chat-template');
  const apiKey = stringOption(ctx, 'api-key') ?? (process.env.KIWI_API_KEY || undefined);
  return {
    path: model,
    ...(modelUrl !== undefined ? { url: modelUrl } : {}),
    ...(weightsHttpOption(ctx) ? {} : { weightsHttp: false }),
    ring: {
      ...(expect !== undefined ? { expect } : {}),
      settleMs: intOption(stringOption(ctx, 'settle-ms') ?? '3000', 'settle-ms', 0, 3_600_000),
      ...flags,
      maxPositions: contextText !== undefined ? intOption(contextText, 'context', 2, 1_048_576) : 4096,
      maxBatch: parallel,
      promptCacheBytes: intOption(stringOption(ctx, 'prompt-cache-mb') ?? '256', 'prompt-cache-mb', 0, 1_048_576) * 1024 * 1024,
      speculative: withVerify(parseSpeculative(stringOption(ctx, 'speculative') ?? (draftModel !== undefined ? 'auto' : 'off')), stringOption(ctx, 'speculative-verify')),
      ...(draftModel !== undefined ? { draftModel } : {}),
      ...(threadsText !== undefined ? { threads: intOption(threadsText, 'threads', 1, 1024) } : {}),
      ...(weightLayoutFlag(ctx) === 'fast' ? { weightLayout: 'fast' as const } : {}),
      ...(booleanOption(ctx, 'no-shard-cache') ? {} : { cache: shardCache() }),
      ...(standbyBytes !== undefined ? { standbyBytes } : {}),
      // KIWI_KEEP_CACHES=0: a re-plan rebuilds every layer of the live requests (bench/faults compares).
      ...(process.env.KIWI_KEEP_CACHES === '0' ? { keepCaches: false } : {}),
      // KIWI_PIPELINED_RECOVERY=0: a re-plan serves the new ring only once every stage is open (bench/faults compares).
      ...(process.env.KIWI_PIPELINED_RECOVERY === '0' ? { pipelinedRecovery: false } : {}),
      // KIWI_CUT_MIN_MB=N|off: split stages where losing a member would cut them only where that spares N MiB (pipeline/fault-cuts.ts; bench/faults compares, tests cut small models).
      ...cutMinOption(process.env.KIWI_CUT_MIN_MB),
    },
    // Measured once the code is shown: its --capabilities file, else its device bench (cached per
    // hardware), else with --no-bench the ring's stand-in (all its RAM, memory tier).
    hostDevice: async () => {
      const file = stringOption(ctx, 'capabilities');
      return measureHostDevice({
        ...(file !== undefined ? { file: await readCapabilities(file), source: file } : {}),
        bench: !booleanOption(ctx, 'no-bench'),
        onProgress: (message) => print('bench-progress', { message }, `measuring this device: ${message}`),
        signal: ctx.signal,
      });
    },
    ...(templateOption !== undefined ? { chatTemplate: resolveChatTemplate(templateOption) } : {}),
    api: {
      host: booleanOption(ctx, 'lan') ? '0.0.0.0' : '127.0.0.1',
      ...apiBrowserPolicy(ctx),
      port: intOption(stringOption(ctx, 'port') ?? '8080', 'port', 0, 65535),
      maxActive: parallel,
      maxQueue: intOption(stringOption(ctx, 'max-queue') ?? '64', 'max-queue', 0, 100_000),
      ...(apiKey !== undefined ? { apiKey } : {}),
      onError: (err) => ctx.stderr.write(`kiwi host: request failed: ${(err as Error)?.stack ?? String(err)}\n`),
      ...(booleanOption(ctx, 'log-requests') ? { onRequestDone: (e: RequestLogEntry) => print('request', { ...e, ms: Math.round(e.ms) }, formatRequestLog(e)) } : {}),
    },
  };
}
