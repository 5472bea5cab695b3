// Waits of the ring's forming over the session's state: members gathering (`expect` N of them, or
// at least one and nobody new for `settleMs`), every ring link up and measured, and the members
// of a ring being built staying in the session (RING_REPLAN when one drops out).
import { KiwiError } from '../errors.js';
import type { HostSession, MemberView } from '../session/host.js';
import type { ChangeWaits } from './change-waits.js';

export interface GatherView {
  session: Pick<HostSession, 'status'>;
  waits: ChangeWaits;
  /** Active members whose memory budget (if any) was checked and holds a layer. */
  plannableCount(): number;
}

/** Resolves once enough plannable members joined and the ring links are up. */
export async function gatherMembers(view: GatherView, expect: number | undefined, settleMs: number, signal?: AbortSignal): Promise<void> {
  if (expect !== undefined) {
    await view.waits.until(() => view.plannableCount() >= expect, `${expect} members to join`, 24 * 3600_000, signal);
  } else {
    let count = 0;
    let since = Date.now();
    await view.waits.until(
      () => {
        const n = view.plannableCount();
        if (n !== count) {
          count = n;
          since = Date.now();
        }
        return n >= 1 && Date.now() - since >= settleMs;
      },
      'members to join',
      24 * 3600_000,
      signal,
    );
  }
  await ringLinksUp(view, undefined, signal);
  // Capabilities (a --memory-mb budget) may arrive after the join: a member refused meanwhile does not count.
  if (view.plannableCount() < (expect ?? 1)) return gatherMembers(view, expect, settleMs, signal);
}

/** Every ring link of the session is up and measured; `members`, when given, must stay in the session meanwhile. */
export function ringLinksUp(view: Omit<GatherView, 'plannableCount'>, members: readonly MemberView[] | undefined, signal?: AbortSignal): Promise<void> {
  return view.waits.until(
    () => {
      if (members !== undefined) checkStillHere(view.session, members);
      const s = view.session.status();
      const failed = s.links.find((l) => l.state === 'failed');
      if (failed !== undefined) throw new KiwiError('RING_BROKEN', `The ring link between peers ${failed.a} and ${failed.b} could not be established (neither direct nor relayed).`);
      return s.ring.length >= 2 && s.links.length >= (s.ring.length === 2 ? 1 : s.ring.length) && s.links.every((l) => l.state === 'up' && l.rttMs !== undefined);
    },
    'the ring links to come up',
    60_000,
    signal,
  );
}

/** Throws RING_REPLAN when a member of the ring being built dropped out. */
export function checkStillHere(session: Pick<HostSession, 'status'>, members: readonly MemberView[]): void {
  const now = new Map(session.status().members.map((m) => [m.memberId, m]));
  for (const m of members) {
    const cur = now.get(m.memberId);
    if (cur === undefined || cur.state !== 'active' || !cur.connected || cur.peer !== m.peer) {
      throw new KiwiError('RING_REPLAN', `${m.name} dropped out while the ring was being built.`);
    }
  }
}
