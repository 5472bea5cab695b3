// Which URLs the Electron shell trusts, as pure functions (no 'electron' import, so they are tested
// without the binary): the UI's own origin compared as parsed origins (a prefix test accepts
// http://127.0.0.1:PORT@evil.example/), the permissions the UI may have, and the links it may open
// in the user's browser.

/** The origin (scheme://host[:port]) of `url`, or null if it does not parse or has none. */
export function originOf(url: string): string | null {
  try {
    const origin = new URL(url).origin;
    return origin === 'null' ? null : origin;
  } catch {
    return null;
  }
}

/** Whether `url` belongs to `origin` (both parsed; user info, paths and case cannot fool it). */
export function isSameOrigin(url: string, origin: string): boolean {
  const a = originOf(url);
  return a !== null && a === originOf(origin);
}

/** The only permissions the UI asks for: copying the session code (navigator.clipboard.writeText). */
const UI_PERMISSIONS: ReadonlySet<string> = new Set(['clipboard-sanitized-write']);

/** Permission requests and checks: denied unless the UI's own origin asks for one it needs. */
export function isPermissionAllowed(permission: string, requestingUrl: string, uiOrigin: string): boolean {
  return UI_PERMISSIONS.has(permission) && isSameOrigin(requestingUrl, uiOrigin);
}

/**
 * Links the UI may open in the user's browser: https only, with a host and without user info
 * (no file:, javascript:, custom protocol handlers or http downgrade).
 */
export function isExternalUrlAllowed(url: string): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  return u.protocol === 'https:' && u.hostname !== '' && u.username === '' && u.password === '';
}
