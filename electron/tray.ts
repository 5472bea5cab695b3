// The tray icon: Kiwi lives here while the window is closed. Its badge and tooltip show the state
// (idle / in a session / serving / error, and a re-plan or model download under way); the menu
// opens the window, copies the session code, pauses contributing (members) and quits.
import { Menu, Tray, app, clipboard, nativeImage, type NativeImage } from 'electron';
import { fileURLToPath } from 'node:url';
import type { SessionStatus } from '../common/control-api.js';
import { drawBadge, TRAY_TOOLTIPS, trayState, type TrayState } from './tray-state.js';

export interface TrayActions {
  openWindow(): void;
  setPaused(paused: boolean): void;
}

export interface KiwiTray {
  update(status: SessionStatus): void;
  destroy(): void;
}

const SIZE = 16;

function baseIcon(): NativeImage {
  const icon = nativeImage.createFromPath(fileURLToPath(new URL('../../build/tray-icon.png', import.meta.url)));
  return icon.isEmpty() ? icon : icon.resize({ width: SIZE, height: SIZE });
}

function badged(base: NativeImage, state: TrayState): NativeImage {
  if (base.isEmpty()) return base;
  const { width, height } = base.getSize();
  return nativeImage.createFromBitmap(Buffer.from(drawBadge(base.toBitmap(), width, height, state)), { width, height });
}

/** What the engine is busy with beyond the tray state: a re-plan, a wait for members, a download. */
function activity(status: SessionStatus): string | null {
  const phase = status.ring_state?.phase;
  if (phase === 'recovering') return 're-forming the ring';
  if (phase === 'waiting') return 'waiting for a member to return';
  const d = status.download;
  if (d?.state === 'downloading') return `downloading the model${d.total_bytes !== null && d.total_bytes > 0 ? ` ${Math.floor((d.received_bytes / d.total_bytes) * 100)}%` : ''}`;
  return null;
}

export function setupTray(actions: TrayActions): KiwiTray {
  const base = baseIcon();
  const icons = new Map<TrayState, NativeImage>((['idle', 'session', 'serving', 'error'] as const).map((s) => [s, badged(base, s)]));
  const tray = new Tray(icons.get('idle') ?? base);
  tray.on('click', actions.openWindow);
  let last: TrayState | undefined;

  const update = (status: SessionStatus): void => {
    const state = trayState(status);
    if (state !== last) {
      tray.setImage(icons.get(state) ?? base);
      last = state;
    }
    tray.setToolTip([TRAY_TOOLTIPS[state], status.code, activity(status)].filter((x) => x !== null).join(' · '));
    const code = status.code;
    tray.setContextMenu(
      Menu.buildFromTemplate([
        { label: 'Open Kiwi', click: actions.openWindow },
        { label: code !== null ? `Copy session code (${code})` : 'Copy session code', enabled: code !== null, click: () => code !== null && clipboard.writeText(code) },
        {
          label: 'Pause contributing',
          type: 'checkbox',
          checked: status.paused,
          enabled: status.role === 'member' && status.phase !== 'ended',
          click: (item) => actions.setPaused(item.checked),
        },
        { type: 'separator' },
        { label: 'Quit Kiwi', click: () => app.quit() },
      ]),
    );
  };
  return { update, destroy: () => tray.destroy() };
}
