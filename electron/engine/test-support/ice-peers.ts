// IcePeers in their own processes (ice-peer-proc.ts), one per network namespace, with their
// signals carried between them as the rendezvous would carry them.
import { ProcessSet, tsEntry, type Event, type Proc } from './processes.js';

export interface IceRouteEvent {
  local: { address: string; port: number; type: string };
  remote: { address: string; port: number; type: string };
}

/** Starts an IcePeer of `role` inside namespace `ns`. */
export function spawnIcePeer(procs: ProcessSet, ns: string, role: 'initiator' | 'responder'): Proc {
  return procs.spawn('ip', ['netns', 'exec', ns, process.execPath, ...tsEntry('electron/engine/test-support/ice-peer-proc.ts'), role]);
}

/** Carries each peer's signals to the other. */
export function wireIcePeers(a: Proc, b: Proc): void {
  for (const [from, to] of [[a, b], [b, a]] as const) {
    let seen = 0;
    const pump = (): void => {
      for (; seen < from.events.length; seen++) {
        const e = from.events[seen] as Event;
        if (e.event === 'signal') to.child.stdin?.write(`${JSON.stringify({ signal: e.signal })}\n`);
      }
    };
    from.child.stdout?.on('data', () => setImmediate(pump));
  }
}

/** Has the peer send `text` on its link. */
export function sendOn(p: Proc, text: string): void {
  p.child.stdin?.write(`${JSON.stringify({ send: text })}\n`);
}
