// The tray icon: Kiwi lives here while the window is closed; the menu opens the window or quits.
import { Menu, Tray, app, nativeImage } from 'electron';
import { fileURLToPath } from 'node:url';

export function setupTray(openWindow: () => void): Tray {
  const icon = nativeImage.createFromPath(fileURLToPath(new URL('../../build/tray-icon.png', import.meta.url)));
  const tray = new Tray(icon.isEmpty() ? nativeImage.createEmpty() : icon.resize({ width: 16, height: 16 }));
  tray.setToolTip('Kiwi');
  tray.setContextMenu(
    Menu.buildFromTemplate([
      { label: 'Open Kiwi', click: openWindow },
      { type: 'separator' },
      { label: 'Quit Kiwi', click: () => app.quit() },
    ]),
  );
  tray.on('click', openWindow);
  return tray;
}
