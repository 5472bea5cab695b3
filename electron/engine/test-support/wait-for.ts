// Waiting in tests for a condition that a real process or socket brings about: polls `check` until
// it gives a value (anything but undefined or false), and fails after `timeoutMs` naming `what`.
// The deadline only bounds a hung test; no assertion depends on how long the wait took.
export function waitFor<T>(check: () => T | undefined | false, what: string, timeoutMs = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const poll = (): void => {
      const v = check();
      if (v !== undefined && v !== false) return resolve(v);
      if (Date.now() - started > timeoutMs) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(poll, 20);
    };
    poll();
  });
}
