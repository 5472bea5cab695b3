// Member names as people see them: on the host's terminal, in events, status, the UI and other
// members' rosters. A name arrives from another machine, so nothing in it may steer a terminal or
// reorder text: ANSI/VT escape sequences (CSI, OSC, DCS...) are removed whole, then every other
// C0/C1 control, bidi override/isolate and invisible format character, and runs of whitespace
// become one space. Pure; the schemas in session-messages.ts apply it where names enter.
import { KiwiError } from '../errors.js';

export const MAX_NAME_CHARS = 64;

// ESC-introduced sequences (ECMA-48): CSI `ESC [ params intermediates final`, OSC/DCS/SOS/PM/APC
// strings up to BEL or ST, and two-byte escapes; the 8-bit CSI (U+009B) and string introducers too.
const ESCAPE_SEQUENCE = new RegExp(
  [
    '\\u001b\\[[0-?]*[ -/]*[@-~]?',
    '\\u009b[0-?]*[ -/]*[@-~]?',
    '(?:\\u001b[\\]PX^_]|[\\u0090\\u0098\\u009d\\u009e\\u009f])[^\\u0007\\u001b\\u009c]*(?:\\u0007|\\u001b\\\\|\\u009c)?',
    '\\u001b[ -/]*[0-~]?',
  ].join('|'),
  'g',
);
// C0, DEL, C1; bidi embeddings, overrides, isolates and marks; zero-width and other invisible
// format characters; line and paragraph separators; the BOM; variation selectors are kept.
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\ufff9-\ufffb]/g;

/** The name as it may be shown: no escapes, no controls, no bidi tricks; at most MAX_NAME_CHARS code points. */
export function sanitizeName(raw: string): string {
  const cleaned = raw
    .normalize('NFC')
    .replace(ESCAPE_SEQUENCE, '')
    .replace(INVISIBLE, ' ')
    .replace(/\s+/gu, ' ')
    .trim();
  return [...cleaned].slice(0, MAX_NAME_CHARS).join('');
}

/** A name typed by this machine's user (`kiwi join --name`, the app's join form): refused rather than silently changed. */
export function validateName(raw: string): string {
  const name = sanitizeName(raw);
  if (name === '') throw new KiwiError('MEMBER_NAME_INVALID', 'The member name is empty; pass --name with a few letters the host will recognise.');
  if (name !== raw.normalize('NFC').trim().replace(/\s+/gu, ' ')) {
    throw new KiwiError('MEMBER_NAME_INVALID', `The member name may not contain control characters, escape sequences or text-direction marks (as shown it would be '${name}').`);
  }
  return name;
}
