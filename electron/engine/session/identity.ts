// A member's identity: an Ed25519 key pair it keeps (RFC 8032, via @noble/curves). The memberId
// is derived from the public key, so nobody can claim a member's id without its secret key; each
// (re)join proves possession by signing the PAKE transcript of that very connection, which no
// replay can reuse. The key lives in a file readable only by the user (0600 in a 0700 folder) in
// the CLI's cache folder or the app's data folder, so a restarted member is the same member.
// Fingerprints: a short code from the key and the session's PAKE transcript, shown to the host and
// to the member, so the host approves the machine it can see, not a name anybody can pick.
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import { KiwiError } from '../errors.js';

export const PUBLIC_KEY_BYTES = 32;
export const SIGNATURE_BYTES = 64;

export interface MemberIdentity {
  readonly memberId: string;
  readonly publicKey: Uint8Array;
  readonly secretKey: Uint8Array;
}

/** base64url of SHA-256 over the public key, 22 characters (132 bits). */
export function memberIdFromPublicKey(publicKey: Uint8Array): string {
  if (publicKey.length !== PUBLIC_KEY_BYTES) throw new KiwiError('IDENTITY_INVALID', `A member's public key must be ${PUBLIC_KEY_BYTES} bytes.`);
  return createHash('sha256').update('kiwi member id v1|').update(publicKey).digest('base64url').slice(0, 22);
}

export function identityFromSecretKey(secretKey: Uint8Array): MemberIdentity {
  const publicKey = ed25519.getPublicKey(secretKey);
  return { memberId: memberIdFromPublicKey(publicKey), publicKey, secretKey };
}

/** A fresh identity held only in memory (a test, or an app without a data folder). */
export function generateIdentity(): MemberIdentity {
  return identityFromSecretKey(new Uint8Array(randomBytes(32)));
}

/** What a member signs to prove its key on one connection: bound to the nameplate, its peer number and that PAKE's transcript. */
function helloMessage(nameplate: number, peer: number, transcriptHash: Uint8Array): Uint8Array {
  const head = Buffer.from(`kiwi hello v1|${nameplate}|${peer}|`);
  return new Uint8Array(Buffer.concat([head, Buffer.from(transcriptHash)]));
}

export function signHello(identity: MemberIdentity, nameplate: number, peer: number, transcriptHash: Uint8Array): Uint8Array {
  return ed25519.sign(helloMessage(nameplate, peer, transcriptHash), identity.secretKey);
}

/** Throws IDENTITY_INVALID unless `publicKey` owns `memberId` and signed this connection's transcript. */
export function verifyHello(p: { memberId: string; publicKey: Uint8Array; signature: Uint8Array; nameplate: number; peer: number; transcriptHash: Uint8Array }): void {
  if (p.publicKey.length !== PUBLIC_KEY_BYTES || memberIdFromPublicKey(p.publicKey) !== p.memberId) {
    throw new KiwiError('IDENTITY_INVALID', `Member id ${p.memberId} does not belong to the key that said hello.`);
  }
  let ok = false;
  try {
    ok = p.signature.length === SIGNATURE_BYTES && ed25519.verify(p.signature, helloMessage(p.nameplate, p.peer, p.transcriptHash), p.publicKey, { zip215: false });
  } catch {
    ok = false;
  }
  if (!ok) throw new KiwiError('IDENTITY_INVALID', `Member ${p.memberId} did not prove that it holds its identity key.`);
}

const FP_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** 40 bits as `xxxx-xxxx` (Crockford base32, lower case): the same on the host's and the member's screen. */
export function fingerprint(publicKey: Uint8Array, transcriptHash: Uint8Array): string {
  const d = createHash('sha256').update('kiwi fingerprint v1|').update(publicKey).update(transcriptHash).digest();
  let bits = 0n;
  for (let i = 0; i < 5; i++) bits = (bits << 8n) | BigInt(d[i] as number);
  let out = '';
  for (let i = 7; i >= 0; i--) out += FP_ALPHABET[Number((bits >> BigInt(i * 5)) & 31n)];
  return `${out.slice(0, 4)}-${out.slice(4)}`;
}

/** A fingerprint as typed: any case, with or without the hyphen; undefined when it cannot be one. */
export function normalizeFingerprint(text: string): string | undefined {
  const t = text.trim().toLowerCase().replace(/-/g, '');
  if (t.length !== 8 || [...t].some((c) => !FP_ALPHABET.includes(c))) return undefined;
  return `${t.slice(0, 4)}-${t.slice(4)}`;
}

/** File name of an identity key under its folder: a label, or one derived from the member's name. */
export function identityLabel(name: string): string {
  return `name-${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
}

interface IdentityFile {
  kiwi_identity: 1;
  secret_key: string;
}

/**
 * The identity stored as `<dir>/<label>.json`, created (0600, folder 0700) the first time. A
 * file that others can read is tightened to 0600; one that is not an identity is refused.
 */
export async function loadOrCreateIdentity(dir: string, label: string): Promise<MemberIdentity> {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(label)) throw new KiwiError('USAGE', `An identity name is 1-64 letters, digits, - or _, got '${label}'.`);
  const file = join(dir, `${label}.json`);
  const existing = await readIdentityFile(file);
  if (existing !== undefined) return existing;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const identity = generateIdentity();
  const body: IdentityFile = { kiwi_identity: 1, secret_key: Buffer.from(identity.secretKey).toString('base64') };
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const fh = await open(tmp, 'wx', 0o600);
  try {
    await fh.writeFile(`${JSON.stringify(body)}\n`);
  } finally {
    await fh.close();
  }
  try {
    // Another process may have created it meanwhile: the first one stays, so both agree.
    const raced = await readIdentityFile(file);
    if (raced !== undefined) return raced;
    await rename(tmp, file);
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
  return (await readIdentityFile(file)) ?? identity;
}

async function readIdentityFile(file: string): Promise<MemberIdentity | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  if (process.platform !== 'win32' && ((await stat(file)).mode & 0o077) !== 0) await chmod(file, 0o600);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const p = parsed as Partial<IdentityFile> | undefined;
  const key = typeof p?.secret_key === 'string' ? Buffer.from(p.secret_key, 'base64') : undefined;
  if (p?.kiwi_identity !== 1 || key === undefined || key.length !== 32) {
    throw new KiwiError('IDENTITY_FILE_INVALID', `${file} is not a Kiwi identity key; move it away and Kiwi makes a new identity (the host will ask to approve it again).`);
  }
  return identityFromSecretKey(new Uint8Array(key));
}
