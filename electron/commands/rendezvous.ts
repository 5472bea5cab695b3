// `kiwi rendezvous [--port P]`: a standalone rendezvous server (nameplates, PAKE passing, relay of
// ciphertext). It holds no weights and runs no inference. Runs until interrupted.
import { KiwiError } from '../engine/errors.js';
import { startRendezvous } from '../engine/rendezvous/server.js';
import { wsUrls } from '../engine/transport/addresses.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';
import { untilStopped } from './session-io.js';

export const rendezvousCommand = defineCommand({
  name: 'rendezvous',
  summary: 'Run a rendezvous server that introduces hosts and members and relays their encrypted traffic',
  description:
    'Hosts open a session here and members find it by the number at the start of the code. The rendezvous ' +
    'passes the key exchange (it cannot learn the key), and relays ring links that cannot connect directly ' +
    '(it sees only ciphertext). After --max-failed-attempts wrong codes from one address a session takes no more ' +
    'members from there (strangers guessing cannot lock the friends out); after 20 from everywhere it takes no new ones.',
  positionals: [],
  options: {
    port: { type: 'string', valueName: 'P', description: 'Port to listen on (0 picks a free one)', default: '7420' },
    host: { type: 'string', valueName: 'ADDR', description: 'Address to listen on (0.0.0.0 for every interface)', default: '0.0.0.0' },
    'max-failed-attempts': { type: 'string', valueName: 'N', description: 'Wrong codes from one address (IPv6: one /64) after which a session refuses that address', default: '5' },
    'stun-second-port': { type: 'string', valueName: 'P', description: 'UDP port of the second STUN service members use to tell how their NAT maps (0 picks a free one)', default: '0' },
    json: { type: 'boolean', description: 'Print events as JSON lines' },
  },
  async run(ctx) {
    const port = intOption(stringOption(ctx, 'port') ?? '7420', 'port', 0, 65535);
    const maxFailedAttempts = intOption(stringOption(ctx, 'max-failed-attempts') ?? '5', 'max-failed-attempts', 1, 1000);
    const bindHost = stringOption(ctx, 'host') ?? '0.0.0.0';
    const stunSecondPort = intOption(stringOption(ctx, 'stun-second-port') ?? '0', 'stun-second-port', 0, 65535);
    const rv = await startRendezvous({ host: bindHost, port, limits: { maxFailedAttempts }, stunSecondPort });
    const urls = wsUrls(bindHost, rv.port);
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, { event: 'listening', url: urls[0] ?? rv.url, urls, port: rv.port });
    else ctx.stdout.write(`kiwi rendezvous listening on ${urls.join(', ')}\n`);
    await untilStopped(ctx.signal);
    await rv.close();
    return 0;
  },
});

export function intOption(value: string, name: string, min: number, max: number): number {
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new KiwiError('USAGE', `--${name} must be a whole number from ${min} to ${max}, not '${value}'`);
  }
  return Number(value);
}
