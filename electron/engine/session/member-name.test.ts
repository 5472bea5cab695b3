import { describe, expect, it } from 'vitest';
import { decodeControl, HostToMember, MemberToHost } from './session-messages.js';
import { sanitizeName, validateName } from './member-name.js';

const ESC = '\u001b';

describe('member names as shown', () => {
  it.each([
    ['a plain name', 'ada', 'ada'],
    ['letters of any script', 'Zoë 李', 'Zoë 李'],
    ['a colour (CSI SGR)', `${ESC}[31mred${ESC}[0m`, 'red'],
    ['a screen clear and cursor move', `${ESC}[2J${ESC}[Hada`, 'ada'],
    ['a window title (OSC ... BEL)', `${ESC}]0;pwned\u0007ada`, 'ada'],
    ['a hyperlink (OSC 8 ... ST)', `${ESC}]8;;http://evil.example${ESC}\\ada${ESC}]8;;${ESC}\\`, 'ada'],
    ['a device control string', `${ESC}P+q544e${ESC}\\ada`, 'ada'],
    ['an 8-bit CSI', '\u009b31mada', 'ada'],
    ['a two-byte escape (RIS)', `${ESC}cada`, 'ada'],
    ['a lone ESC at the end', `ada${ESC}`, 'ada'],
    ['backspaces that would overwrite text', 'bob\b\b\bada', 'bob ada'],
    ['a carriage return and newline', 'ada\r\nroot joined', 'ada root joined'],
    ['NUL and DEL', 'a\u0000d\u007fa', 'a d a'],
    ['C1 controls', 'a\u0085d\u008da', 'a d a'],
    ['a right-to-left override', 'ada\u202egnp.exe', 'ada gnp.exe'],
    ['bidi isolates and marks', '\u2067ada\u2069\u200f', 'ada'],
    ['zero-width characters', 'a\u200bd\u2060a\ufeff', 'a d a'],
    ['runs of spaces and tabs', '  ada \t  lovelace  ', 'ada lovelace'],
    ['only controls', `${ESC}[31m\u0007\u202e`, ''],
  ])('%s', (_what, raw, shown) => {
    expect(sanitizeName(raw)).toBe(shown);
  });

  it('cuts a long name to 64 characters', () => {
    expect([...sanitizeName('é'.repeat(100))]).toHaveLength(64);
  });

  it('refuses a typed name with escapes instead of changing it, and keeps a clean one', () => {
    expect(validateName('ada lovelace')).toBe('ada lovelace');
    expect(() => validateName(`${ESC}[31mada`)).toThrow(expect.objectContaining({ code: 'MEMBER_NAME_INVALID' }));
    expect(() => validateName('   ')).toThrow(expect.objectContaining({ code: 'MEMBER_NAME_INVALID' }));
  });

  it('strips the name of a hello and of a roster where they enter, and refuses one with nothing visible', () => {
    const hello = (name: string) => new TextEncoder().encode(JSON.stringify({
      type: 'hello', memberId: 'abcdefgh12', name, publicKey: Buffer.alloc(32).toString('base64'), signature: Buffer.alloc(64).toString('base64'), addresses: [],
    }));
    const m = decodeControl(MemberToHost, hello(`${ESC}[2J${ESC}]0;x\u0007mallory\u202e`));
    expect(m.type === 'hello' && m.name).toBe('mallory');
    expect(() => decodeControl(MemberToHost, hello(`${ESC}[2J`))).toThrow(expect.objectContaining({ code: 'CONTROL_MALFORMED' }));
    const roster = decodeControl(HostToMember, new TextEncoder().encode(JSON.stringify({
      type: 'roster', members: [{ peer: 1, name: `${ESC}[31mbob`, state: 'active', connected: true, inRing: true }],
    })));
    expect(roster.type === 'roster' && roster.members[0]?.name).toBe('bob');
  });
});
