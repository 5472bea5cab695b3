// The tray's state, decided from the control API's status snapshot, and the badge drawn on the
// tray icon for it (a coloured dot in the corner of a BGRA bitmap). Pure: tray.ts does the Electron part.
import type { SessionStatus } from '../common/control-api.js';

export type TrayState = 'idle' | 'session' | 'serving' | 'error';

export function trayState(status: SessionStatus): TrayState {
  if (status.role === 'member' && status.phase === 'ended') return 'error';
  if (status.role === 'none') return status.error !== null ? 'error' : 'idle';
  if (status.role === 'host' && status.serving !== null) return 'serving';
  return 'session';
}

export const TRAY_TOOLTIPS: Record<TrayState, string> = {
  idle: 'Kiwi: not in a session',
  session: 'Kiwi: in a session',
  serving: 'Kiwi: serving the model',
  error: 'Kiwi: something went wrong (open Kiwi for details)',
};

/** BGRA colours of the badge; idle has none. */
const BADGE: Record<TrayState, [number, number, number] | null> = {
  idle: null,
  session: [0xd9, 0x8a, 0x3f], // blue
  serving: [0x2a, 0x8f, 0x4f], // green
  error: [0x2d, 0x37, 0xc8], // red
};

/** Returns a copy of a `width`×`height` BGRA bitmap with the state's dot in the lower right corner. */
export function drawBadge(bitmap: Uint8Array, width: number, height: number, state: TrayState): Uint8Array {
  if (bitmap.length !== width * height * 4) throw new Error(`bitmap of ${bitmap.length} bytes is not ${width}x${height} BGRA`);
  const out = new Uint8Array(bitmap);
  const colour = BADGE[state];
  if (colour === null) return out;
  const r = Math.max(2, Math.round(width * 0.22));
  const cx = width - r - 0.5;
  const cy = height - r - 0.5;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const d = Math.hypot(x - cx, y - cy);
      if (d > r) continue;
      const i = (y * width + x) * 4;
      // A white ring around the dot keeps it visible on dark and light menu bars.
      const [b, g, rr] = d > r - Math.max(1, width / 16) ? [255, 255, 255] : colour;
      out[i] = b;
      out[i + 1] = g;
      out[i + 2] = rr;
      out[i + 3] = 255;
    }
  }
  return out;
}
