// Accessibility basics, checked on whatever screen a page shows: every enabled control is reached
// by Tab, and every input has a label.
import type { Page } from 'playwright-core';

/** Names of the visible, enabled controls that pressing Tab from the top never reaches. */
export async function untabbable(page: Page): Promise<string[]> {
  const controls = await page.evaluate(() => [...document.querySelectorAll<HTMLElement>('button, input, textarea, select, a[href]')]
    .filter((el) => !(el as HTMLButtonElement).disabled && el.getAttribute('tabindex') !== '-1' && el.offsetParent !== null)
    .map((el) => el.getAttribute('aria-label') ?? el.textContent ?? el.id));
  const visited = new Set<string>();
  await page.locator('body').focus();
  for (let i = 0; i < controls.length + 6; i++) {
    await page.keyboard.press('Tab');
    visited.add(await page.evaluate(() => {
      const el = document.activeElement as HTMLElement | null;
      return el?.getAttribute('aria-label') ?? el?.textContent ?? el?.id ?? '';
    }));
  }
  return controls.filter((name) => !visited.has(name));
}

/** How many inputs have neither a <label> nor an aria-label. */
export function unlabelled(page: Page): Promise<number> {
  return page.evaluate(() => [...document.querySelectorAll('input, textarea, select')].filter((el) => (el as HTMLInputElement).labels?.length === 0 && !el.getAttribute('aria-label')).length);
}
