// `kiwi join CODE`: joins the session of that code, keeps the membership alive with heartbeats,
// reconnects after a dropped connection and takes part in ring links. When the host assigns a layer
// range it loads those layers (its own --model copy, earlier transfers, or streamed from the host)
// and runs them in the ring. The node is composed in engine/hosting/member-node.ts; this file parses
// the flags and prints. A wrong code exits non-zero.
import { hostname } from 'node:os';
import { createInterface } from 'node:readline';
import { isKiwiError, KiwiError } from '../engine/errors.js';
import { progressText } from '../engine/progress-rate.js';
import { layerRangeText } from '../../common/ring-layout.js';
import type { ControlEndpoint } from '../engine/hosting/control-endpoint.js';
import { createMemberNode } from '../engine/hosting/member-node.js';
import { identityLabel } from '../engine/session/identity.js';
import { validateName } from '../engine/session/member-name.js';
import { readCapabilities } from './capabilities-file.js';
import { memoryBudgetBytes } from '../engine/planner/model-sizes.js';
import { booleanOption, defineCommand, stringOption } from './command.js';
import { intOption } from './rendezvous.js';
import { parseIceServers } from '../engine/transport/ice-servers.js';
import { mappedUrl } from '../engine/transport/port-mapping.js';
import { eventPrinter, untilStopped } from './session-io.js';
import { PROVIDER_OPTION, resolveProviderFlag } from './provider-flag.js';
import { standbyBudgetBytes } from '../engine/pipeline/standby.js';
import { standbyOptions } from '../engine/pipeline/standby-member.js';

export const joinCommand = defineCommand({
  name: 'join',
  summary: 'Join a session with the code the host shows',
  description:
    'The code is read aloud as number-word-word-word (case and spaces do not matter). The words never leave ' +
    'this machine: they prove the code to the host by a PAKE (SPAKE2, RFC 9382). Use the rendezvous the host ' +
    'shows next to the code (default $KIWI_RENDEZVOUS, else the one a host on this network announces).',
  positionals: [{ name: 'code', description: 'The session code, e.g. 42-orbit-velvet-kiwi', rest: true }],
  options: {
    rendezvous: { type: 'string', valueName: 'URL', description: 'Rendezvous of the session' },
    name: { type: 'string', valueName: 'NAME', description: 'Name the host sees (default: this computer\'s name)' },
    'member-id': {
      type: 'string', valueName: 'KEY',
      description: 'Which of this machine\'s identity keys to join with (1-64 letters, digits, - or _; default: one per --name). ' +
        'The key is kept in the cache folder\'s identity/ (readable only by you); the member id the host sees derives from it, so a restarted member rejoins as itself',
    },
    listen: { type: 'string', valueName: 'ADDR', description: 'Address for direct ring links', default: '0.0.0.0' },
    'relay-only': { type: 'boolean', description: 'Accept no direct links; everything goes through the rendezvous' },
    'no-ice': { type: 'boolean', description: 'No ICE (UDP, WebRTC data channel) ring links: only WebSocket direct links and the relay' },
    'no-port-mapping': { type: 'boolean', description: 'Do not map the direct-link port on the router (UPnP-IGD / NAT-PMP)' },
    stun: { type: 'string', valueName: 'URLS', description: 'STUN servers for ICE links, comma-separated stun:HOST:PORT (in addition to the rendezvous\'s own)' },
    turn: { type: 'string', valueName: 'URLS', description: 'TURN servers for ICE links, comma-separated turn:USER:PASSWORD@HOST:PORT' },
    capabilities: { type: 'string', valueName: 'FILE', description: 'Device summary to show the host (the output of `kiwi bench --json`)' },
    'heartbeat-ms': { type: 'string', valueName: 'MS', description: 'Interval of heartbeats to the host', default: '5000' },
    model: { type: 'string', valueName: 'FILE', description: 'This machine\'s own copy of the host\'s model (else its layers come from the host)' },
    threads: { type: 'string', valueName: 'N', description: 'CPU threads for this member\'s stage (default: all cores)' },
    provider: PROVIDER_OPTION,
    advertise: { type: 'string', valueName: 'URLS', description: 'ws:// addresses (comma-separated) to advertise for direct ring links instead of the listener\'s own, e.g. a port forward' },
    'keep-free-mb': { type: 'string', valueName: 'MB', description: 'Memory (VRAM with CUDA) to leave free for other programs: below it, ask the host for fewer layers instead of running out' },
    'memory-mb': {
      type: 'string', valueName: 'MB',
      description: 'The most memory this member may use, the runtime\'s own included: the host plans its layers and KV cache within it (--keep-free-mb instead watches the machine\'s free memory while running)',
    },
    'standby-gb': {
      type: 'string', valueName: 'GB',
      description: 'Disk to keep standby layers in: once the ring serves, the layers next to this member\'s range (or the whole model, where it fits) are fetched in the background, so a re-plan loads them from disk instead of the network',
    },
    'no-bench': { type: 'boolean', description: 'Do not measure this device (without --capabilities the host then plans this member with its own figures)' },
    'no-shard-cache': { type: 'boolean', description: 'Build the stage graph in memory instead of using the shard cache' },
    json: { type: 'boolean', description: 'Print one JSON object per event' },
  },
  async run(ctx) {
    const json = booleanOption(ctx, 'json');
    const print = eventPrinter(ctx.stdout, json);
    const identityKey = stringOption(ctx, 'member-id');
    const name = validateName(stringOption(ctx, 'name') ?? hostname().slice(0, 64));
    const capabilitiesFile = stringOption(ctx, 'capabilities');
    const code = ctx.positionals.join(' ');
    const advertise = stringOption(ctx, 'advertise')?.split(',').map((u) => u.trim()).filter((u) => u !== '');
    if (advertise !== undefined && (advertise.length > 8 || advertise.some((u) => !/^wss?:\/\/\S+$/.test(u)))) {
      throw new KiwiError('USAGE', '--advertise takes up to 8 comma-separated ws:// or wss:// URLs');
    }
    const memoryMbText = stringOption(ctx, 'memory-mb');
    const memoryBudget = memoryMbText !== undefined ? memoryBudgetBytes(intOption(memoryMbText, 'memory-mb', 1, 2 ** 30), '--memory-mb') : undefined;
    const heartbeatMs = intOption(stringOption(ctx, 'heartbeat-ms') ?? '5000', 'heartbeat-ms', 10, 3_600_000);
    const modelPath = stringOption(ctx, 'model');
    const threadsText = stringOption(ctx, 'threads');
    const keepFreeText = stringOption(ctx, 'keep-free-mb');
    const standbyBytes = standbyBudgetBytes(stringOption(ctx, 'standby-gb'), '--standby-gb');
    // Before anyone is contacted: an explicit --provider that cannot run fails here.
    const provider = await resolveProviderFlag(ctx, print);
    const rendezvousUrl = stringOption(ctx, 'rendezvous') ?? process.env.KIWI_RENDEZVOUS;
    // Without an address, the node looks for the host's announcement on the LAN (engine/hosting/member-node.ts).
    const node = await createMemberNode({
      code,
      ...(rendezvousUrl !== undefined ? { rendezvousUrl } : {}),
      name,
      identity: { label: identityKey ?? identityLabel(name) },
      // Without --capabilities, the device bench (cached per hardware) tells the host what this machine can do.
      capabilities: {
        ...(capabilitiesFile !== undefined ? { file: await readCapabilities(capabilitiesFile) } : {}),
        bench: !booleanOption(ctx, 'no-bench'),
        ...(memoryBudget !== undefined ? { memoryBudgetBytes: memoryBudget } : {}),
        onProgress: (message) => print('bench-progress', { message }, `measuring this device: ${message}`),
      },
      session: {
        heartbeatMs,
        ...(booleanOption(ctx, 'relay-only') ? {} : { listenHost: stringOption(ctx, 'listen') ?? '0.0.0.0' }),
        ice: booleanOption(ctx, 'no-ice') ? false : { iceServers: parseIceServers(stringOption(ctx, 'stun'), stringOption(ctx, 'turn')) },
        ...(advertise !== undefined ? { advertise } : {}),
        ...(booleanOption(ctx, 'no-port-mapping') ? { portMapping: false } : {}),
      },
      ring: {
        ...(keepFreeText !== undefined ? { keepFreeBytes: intOption(keepFreeText, 'keep-free-mb', 0, 2 ** 30) * 2 ** 20 } : {}),
        ...(modelPath !== undefined ? { modelPath } : {}),
        provider,
        ...(threadsText !== undefined ? { threads: intOption(threadsText, 'threads', 1, 1024) } : {}),
        shardCache: !booleanOption(ctx, 'no-shard-cache'),
        ...(standbyBytes !== undefined ? { standby: standbyOptions(standbyBytes, memoryBudget !== undefined) } : {}),
        // The budget admits one session's scratch: a range that grows reopens as one session.
        ...(memoryBudget !== undefined ? { growInPlace: false } : {}),
      },
      // `kiwi status` asks this member through a loopback control API (token in a 0600 file).
      control: true,
      signal: ctx.signal,
    });
    const { member, ring } = node;
    member.on('joined', (j) => print('joined', {
      peer: j.peer, state: j.state, member_id: member.memberId, fingerprint: j.fingerprint, rejoin: j.rejoin,
      port_mapping: member.portMapping?.protocol ?? null, ...(member.portMapping !== undefined ? { mapped: mappedUrl(member.portMapping) } : {}),
    },
      j.state === 'active' ? `joined the session (fingerprint ${j.fingerprint})` : `waiting for the host to approve: tell them your fingerprint ${j.fingerprint}`));
    member.on('approved', () => print('approved', {}, 'the host approved this member'));
    member.on('disconnected', (reason) => print('disconnected', { reason }, `disconnected (${reason}); reconnecting`));
    member.on('link', (s) => {
      if (s.state === 'up' && s.rttMs !== undefined) {
        print('link', { peer: s.peer, kind: s.kind, transport: s.transport ?? null, rtt_ms: Number(s.rttMs.toFixed(3)) },
          `link to ${s.peer}: ${s.kind}${s.transport !== undefined ? ` (${s.transport})` : ''}, ${s.rttMs.toFixed(2)} ms`);
      }
    });
    member.on('warning', (err) => print('warning', { code: err.code, message: err.message }, `warning: ${err.message}`));
    ring.on('assigned', (a) => print('assigned', { start: a.start, end: a.end, head: a.head }, `assigned ${layerRangeText(a.start, a.end)}`));
    ring.on('weights-progress', (p) => print.progress('weights-progress', 'weights', {
      received_bytes: p.receivedBytes, total_bytes: p.totalBytes, bytes_per_s: p.bytesPerSecond, eta_s: p.etaSeconds, final: p.final,
    }, `weights: ${progressText({ done: p.receivedBytes, total: p.totalBytes, rate: p.bytesPerSecond, etaSeconds: p.etaSeconds, final: p.final })}`, p.final));
    ring.on('ready', (r) => print('ready', { epoch: r.epoch, source: r.source, transferred_bytes: r.transferredBytes, load_ms: Math.round(r.loadMs), ...(r.transferMs !== undefined ? { transfer_ms: Math.round(r.transferMs) } : {}), segments: r.segments, opened_layers: r.openedLayers }, `ready (weights from ${r.source})`));
    ring.on('standby', (s) => print('standby', { epoch: s.epoch, state: s.state, layers: s.layers, held_bytes: s.heldBytes, fetched_bytes: s.fetchedBytes, budget_bytes: s.budgetBytes },
      `standby: ${s.layers.length} layers on disk (${Math.round(s.heldBytes / 2 ** 20)} MiB of ${Math.round(s.budgetBytes / 2 ** 20)} MiB)`));
    ring.on('error', (err) => print('error', { code: err.code, message: err.message }, `error: ${err.message}`));
    ring.on('memory', (m) => print('memory', { low: m.low, free_bytes: m.freeBytes, memory_bytes: m.memoryBytes },
      m.low ? `free memory is low (${Math.round(m.freeBytes / 2 ** 20)} MiB): asking the host for fewer layers` : 'free memory is back: offering the full share again'));
    ring.on('warning', (err) => print('warning', { code: err.code, message: err.message }, `warning: ${err.message}`));
    // `status` on stdin: this member's stage and the requests whose KV caches it holds.
    const rl = createInterface({ input: process.stdin, terminal: false });
    rl.on('line', (line) => {
      if (line.trim() !== 'status') return;
      const status = node.status();
      print('status', status, JSON.stringify(status, null, 2));
    });
    const control = node.control as ControlEndpoint;
    print('control', { api_url: control.api.url, token_file: control.tokenFile }, `Status: kiwi status (control API ${control.api.url}, token in ${control.tokenFile})`);
    const fail = (err: KiwiError): number => {
      // The --json contract wants an error event; text mode lets cli.ts print the message.
      if (!json) throw err;
      print('error', { code: err.code, message: err.message }, '');
      ctx.stderr.write(`kiwi: ${err.message}\n`);
      return 1;
    };
    try {
      await node.connect();
    } catch (err) {
      rl.close();
      await node.closeControl();
      if (!isKiwiError(err)) throw err;
      return fail(err);
    }
    let failure: KiwiError | undefined;
    await untilStopped(ctx.signal, node.fatal.then((err) => (failure = err)));
    rl.close();
    await node.closeControl();
    if (failure?.code === 'MEMORY_BUDGET_TOO_SMALL') await member.leave().catch(() => undefined);
    if (failure !== undefined) return fail(failure);
    // Hand the layers back first, so the ring re-plans without this machine before it goes.
    print('leaving', {}, 'handing back this machine\'s layers…');
    await node.leave();
    return 0;
  },
});
