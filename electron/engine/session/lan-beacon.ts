// Finding a host's embedded rendezvous on the same LAN without typing its address: the host
// broadcasts a small UDP beacon (nameplate + rendezvous URLs) once a second; `kiwi join CODE`
// listens for the beacon of its code's nameplate. The beacon carries nothing secret (the
// nameplate is public); joining still needs the words. Beacons are validated like any input.
import { createSocket, type Socket } from 'node:dgram';
import { networkInterfaces } from 'node:os';
import { z } from 'zod';
import { KiwiError } from '../errors.js';

export const LAN_BEACON_PORT = 7421;
const MAX_BEACON_BYTES = 1024;

const Beacon = z.strictObject({
  kiwi: z.literal(1),
  nameplate: z.number().int().min(1).max(9999),
  rendezvous: z.array(z.string().max(200).regex(/^wss?:\/\/[^\s]+$/)).min(1).max(8),
});
export type Beacon = z.infer<typeof Beacon>;

export function encodeBeacon(beacon: Beacon): Buffer {
  const bytes = Buffer.from(JSON.stringify(Beacon.parse(beacon)));
  if (bytes.length > MAX_BEACON_BYTES) throw new Error('beacon too large');
  return bytes;
}

/** undefined for anything that is not a valid beacon (other programs may use the port). */
export function decodeBeacon(bytes: Uint8Array): Beacon | undefined {
  if (bytes.length > MAX_BEACON_BYTES) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch {
    return undefined;
  }
  const r = Beacon.safeParse(json);
  return r.success ? r.data : undefined;
}

/** The directed broadcast address of each IPv4 LAN interface, and the limited broadcast. */
export function broadcastTargets(): string[] {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const info of list ?? []) {
      if (info.family !== 'IPv4' || info.internal) continue;
      const addr = info.address.split('.').map(Number);
      const mask = info.netmask.split('.').map(Number);
      out.add(addr.map((a, i) => (a | (~(mask[i] ?? 0) & 0xff)) & 0xff).join('.'));
    }
  }
  out.add('255.255.255.255');
  return [...out];
}

export interface BeaconOptions {
  beacon: Beacon;
  port?: number;
  targets?: string[];
  intervalMs?: number;
}

/** Announces the session until closed. */
export async function startBeacon(opts: BeaconOptions): Promise<{ close(): Promise<void> }> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, () => {
      socket.off('error', reject);
      resolve();
    });
  });
  socket.setBroadcast(true);
  const payload = encodeBeacon(opts.beacon);
  const targets = opts.targets ?? broadcastTargets();
  const port = opts.port ?? LAN_BEACON_PORT;
  // A target that cannot be reached (no route, no interface) is skipped; the others still go out.
  const send = (): void => {
    for (const t of targets) socket.send(payload, port, t, () => undefined);
  };
  send();
  const timer = setInterval(send, opts.intervalMs ?? 1000);
  return {
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(timer);
        socket.close(() => resolve());
      }),
  };
}

/** Waits for the beacon of `nameplate`; throws SESSION_NOT_FOUND_ON_LAN after timeoutMs. */
export async function findOnLan(nameplate: number, opts: { port?: number; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<string[]> {
  const socket: Socket = createSocket({ type: 'udp4', reuseAddr: true });
  const timeoutMs = opts.timeoutMs ?? 3000;
  try {
    return await new Promise<string[]>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new KiwiError('SESSION_NOT_FOUND_ON_LAN', `No host announced session ${nameplate} on this network within ${timeoutMs / 1000} s. Pass the rendezvous the host shows with --rendezvous.`)),
        timeoutMs,
      );
      opts.signal?.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(opts.signal?.reason as Error);
      }, { once: true });
      socket.on('message', (msg) => {
        const b = decodeBeacon(msg);
        if (b?.nameplate === nameplate) {
          clearTimeout(timer);
          resolve(b.rendezvous);
        }
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(new KiwiError('SESSION_NOT_FOUND_ON_LAN', `Cannot listen for LAN announcements on UDP ${opts.port ?? LAN_BEACON_PORT}: ${err.message}. Pass --rendezvous.`));
      });
      socket.bind(opts.port ?? LAN_BEACON_PORT);
    });
  } finally {
    socket.close();
  }
}
