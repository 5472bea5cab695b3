import { mkdtemp, rm, stat, writeFile, chmod, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint, generateIdentity, loadOrCreateIdentity, memberIdFromPublicKey, normalizeFingerprint, signHello, verifyHello } from './identity.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});
const tempDir = async (): Promise<string> => {
  const d = await mkdtemp(join(tmpdir(), 'kiwi-identity-'));
  dirs.push(d);
  return d;
};

describe('member identity', () => {
  const tt = new Uint8Array(32).fill(7);

  it('derives the member id from the public key and proves it by a signature over the transcript', () => {
    const id = generateIdentity();
    expect(id.memberId).toBe(memberIdFromPublicKey(id.publicKey));
    expect(id.memberId).toMatch(/^[A-Za-z0-9_-]{22}$/);
    const signature = signHello(id, 42, 3, tt);
    expect(() => verifyHello({ memberId: id.memberId, publicKey: id.publicKey, signature, nameplate: 42, peer: 3, transcriptHash: tt })).not.toThrow();
  });

  it.each([
    ['another connection\'s transcript', { transcriptHash: new Uint8Array(32).fill(8) }],
    ['another peer number', { peer: 4 }],
    ['another nameplate', { nameplate: 43 }],
    ['a member id the key does not own', { memberId: generateIdentity().memberId }],
    ['somebody else\'s key', { publicKey: generateIdentity().publicKey }],
    ['a zero signature', { signature: new Uint8Array(64) }],
  ])('refuses a hello with %s', (_what, change) => {
    const id = generateIdentity();
    const good = { memberId: id.memberId, publicKey: id.publicKey, signature: signHello(id, 42, 3, tt), nameplate: 42, peer: 3, transcriptHash: tt };
    expect(() => verifyHello({ ...good, ...change })).toThrow(expect.objectContaining({ code: 'IDENTITY_INVALID' }));
  });

  it('gives a short fingerprint that depends on the key and the transcript', () => {
    const a = generateIdentity();
    const fp = fingerprint(a.publicKey, tt);
    expect(fp).toMatch(/^[0-9a-z]{4}-[0-9a-z]{4}$/);
    expect(fingerprint(a.publicKey, tt)).toBe(fp);
    expect(fingerprint(generateIdentity().publicKey, tt)).not.toBe(fp);
    expect(fingerprint(a.publicKey, new Uint8Array(32))).not.toBe(fp);
    expect(normalizeFingerprint(fp.toUpperCase().replace('-', ''))).toBe(fp);
    expect(normalizeFingerprint('ada')).toBeUndefined();
  });

  it('keeps the key in a file only the user can read, and loads the same identity after a restart', async () => {
    const dir = join(await tempDir(), 'identity');
    const first = await loadOrCreateIdentity(dir, 'kim');
    const again = await loadOrCreateIdentity(dir, 'kim');
    expect(again.memberId).toBe(first.memberId);
    expect(Buffer.from(again.secretKey).equals(Buffer.from(first.secretKey))).toBe(true);
    expect((await stat(join(dir, 'kim.json'))).mode & 0o777).toBe(0o600);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect((await loadOrCreateIdentity(dir, 'other')).memberId).not.toBe(first.memberId);
  });

  it('tightens a key file others can read, and refuses one that is not a key', async () => {
    const dir = await tempDir();
    const id = await loadOrCreateIdentity(dir, 'kim');
    await chmod(join(dir, 'kim.json'), 0o644);
    expect((await loadOrCreateIdentity(dir, 'kim')).memberId).toBe(id.memberId);
    expect((await stat(join(dir, 'kim.json'))).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(join(dir, 'kim.json'), 'utf8'))).toMatchObject({ kiwi_identity: 1 });
    await writeFile(join(dir, 'bad.json'), '{"hello":1}');
    await expect(loadOrCreateIdentity(dir, 'bad')).rejects.toMatchObject({ code: 'IDENTITY_FILE_INVALID' });
    await expect(loadOrCreateIdentity(dir, '../escape')).rejects.toMatchObject({ code: 'USAGE' });
  });
});
