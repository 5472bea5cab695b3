// `kiwi host`: opens a session and prints its code, then who joins, leaves and is evicted, and the
// ring links as they come up. Serving the model through the ring comes with the pipeline; for now
// the session forms, members are admitted and monitored, and links are measured.
// Text lines on stdin: `approve NAME`, `reject NAME` (without --auto-approve), `status`.
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { isKiwiError, KiwiError } from '../engine/errors.js';
import { createHost } from '../engine/session/host.js';
import { booleanOption, defineCommand, stringOption } from './command.js';
import { intOption } from './rendezvous.js';
import { eventPrinter, untilStopped } from './session-io.js';

export const hostCommand = defineCommand({
  name: 'host',
  summary: 'Start a session: print its code and admit the members who join with it',
  description:
    'Without --rendezvous the host runs its own rendezvous (shown next to the code; members pass it with ' +
    '--rendezvous). Without --auto-approve each member waits until you type `approve NAME` (or `reject NAME`). ' +
    'Type `status` for the members, their state, addresses, links (direct or relayed) and round-trip times.',
  positionals: [],
  options: {
    model: { type: 'string', valueName: 'M', description: 'Model the session will serve (GGUF file)' },
    port: { type: 'string', valueName: 'P', description: 'Port of the OpenAI-compatible API once serving', default: '8080' },
    rendezvous: { type: 'string', valueName: 'URL', description: 'Use this rendezvous instead of an embedded one' },
    'rendezvous-host': { type: 'string', valueName: 'ADDR', description: 'Address of the embedded rendezvous (beyond loopback it is announced on the LAN)', default: '0.0.0.0' },
    'rendezvous-port': { type: 'string', valueName: 'P', description: 'Port of the embedded rendezvous (0: any free port)', default: '0' },
    'auto-approve': { type: 'boolean', description: 'Admit everyone who knows the code without asking' },
    expect: { type: 'string', valueName: 'N', description: 'Report when N members have joined' },
    listen: { type: 'string', valueName: 'ADDR', description: 'Address for direct ring links', default: '0.0.0.0' },
    'relay-only': { type: 'boolean', description: 'Accept no direct links; everything goes through the rendezvous' },
    'soft-evict-ms': { type: 'string', valueName: 'MS', description: 'Silence after which a member leaves the ring', default: '15000' },
    'hard-evict-ms': { type: 'string', valueName: 'MS', description: 'Silence after which a member is forgotten', default: '120000' },
    json: { type: 'boolean', description: 'Print one JSON object per event' },
  },
  async run(ctx) {
    const json = booleanOption(ctx, 'json');
    const print = eventPrinter(ctx.stdout, json);
    const expectCount = stringOption(ctx, 'expect') !== undefined ? intOption(stringOption(ctx, 'expect') as string, 'expect', 1, 1000) : undefined;
    const softEvictMs = intOption(stringOption(ctx, 'soft-evict-ms') ?? '15000', 'soft-evict-ms', 1, 86_400_000);
    const hardEvictMs = intOption(stringOption(ctx, 'hard-evict-ms') ?? '120000', 'hard-evict-ms', 2, 86_400_000);
    if (hardEvictMs <= softEvictMs) throw new KiwiError('USAGE', '--hard-evict-ms must be longer than --soft-evict-ms');
    const model = stringOption(ctx, 'model');
    if (model !== undefined) {
      // Checked now so that a typo fails before friends start joining.
      const isFile = await stat(model).then((st) => st.isFile(), () => false);
      if (!isFile) throw new KiwiError('FILE_NOT_FOUND', `Model file ${model} does not exist. Pass the path of a GGUF file.`);
    }
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
    });
    print('session', { code: host.code, nameplate: host.nameplate, rendezvous: host.rendezvousUrl, model: model ?? null },
      `Session code: ${host.code}\nMembers join with: kiwi join ${host.code} --rendezvous ${host.rendezvousUrl}`);
    const names = new Map<string, string>();
    let joined = 0;
    host.on('change', (c) => {
      names.set(c.name, c.memberId);
      switch (c.type) {
        case 'member-pending':
          print('member-pending', { name: c.name, member_id: c.memberId }, `${c.name} wants to join: type 'approve ${c.name}' or 'reject ${c.name}'`);
          break;
        case 'member-joined':
          print('member-joined', { name: c.name, member_id: c.memberId, rejoined: c.rejoined }, `${c.name} ${c.rejoined ? 'rejoined' : 'joined'}`);
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
    host.on('nameplate-closed', (reason) =>
      print('error', { code: 'NAMEPLATE_CLOSED', message: `The session takes no more members: ${reason}. Restart the host for a new code.` },
        `the session takes no more members: ${reason}`));
    host.on('link', (l) => {
      if (l.state === 'up' && l.rttMs !== undefined) {
        print('link', { a: l.a, b: l.b, kind: l.kind, rtt_ms: Number(l.rttMs.toFixed(3)) }, `link ${l.a}-${l.b} ${l.kind}, ${l.rttMs.toFixed(2)} ms`);
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
        if (verb === 'status') print('status', { ...host.status() }, JSON.stringify(host.status(), null, 2));
        else if (verb === 'approve' || verb === 'reject') {
          const id = names.get(who) ?? who;
          host.decide(id, verb === 'approve');
        } else if (verb !== '' && verb !== undefined) {
          throw new KiwiError('USAGE', `unknown input '${verb}': use approve NAME, reject NAME or status`);
        }
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        print('error', { code: err.code, message: err.message }, `error: ${err.message}`);
      }
    });
    await untilStopped(ctx.signal, ended);
    rl.close();
    await host.close();
    return 0;
  },
});
