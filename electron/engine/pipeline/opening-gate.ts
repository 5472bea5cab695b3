// A member's stage whose weights are in while its sessions open. A pipelined re-plan serves the new
// ring from that moment (session-host.ts buildRing), so steps for the stage may arrive before it
// can run them: they wait here until its load ends (opened, failed or replaced by a newer
// assignment), then look again at what the member runs.
export class OpeningGate<K> {
  private opening: { key: K; done: Promise<void>; end: () => void } | undefined;

  /** The stage of `key` opens from now on (until end(key)); a load still marked before it ends now. */
  begin(key: K): void {
    this.opening?.end();
    let end = (): void => {};
    const done = new Promise<void>((resolve) => (end = resolve));
    this.opening = { key, done, end };
  }

  /** The load of `key` ended, whichever way: steps waiting for it go on. */
  end(key: K): void {
    if (this.opening?.key !== key) return;
    this.opening.end();
    this.opening = undefined;
  }

  /** Resolves at once unless the stage of `key` is opening now, else once its load ends. */
  async wait(key: K | undefined): Promise<void> {
    if (this.opening !== undefined && key !== undefined && this.opening.key === key) await this.opening.done;
  }
}
