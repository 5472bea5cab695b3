import { describe, expect, it } from 'vitest';
import { p256 } from '@noble/curves/nist.js';
import { isKiwiError } from '../errors.js';
import { passwordScalar, spake2Start } from './spake2.js';

const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);

// RFC 9382 Appendix B, SPAKE2-P256-SHA256-HKDF-SHA256-HMAC-SHA256 (AAD empty).
const VECTORS = [
  {
    idA: 'server', idB: 'client',
    w: '2ee57912099d31560b3a44b1184b9b4866e904c49d12ac5042c97dca461b1a5f',
    x: '43dd0fd7215bdcb482879fca3220c6a968e66d70b1356cac18bb26c84a78d729',
    pA: '04a56fa807caaa53a4d28dbb9853b9815c61a411118a6fe516a8798434751470f9010153ac33d0d5f2047ffdb1a3e42c9b4e6be662766e1eeb4116988ede5f912c',
    y: 'dcb60106f276b02606d8ef0a328c02e4b629f84f89786af5befb0bc75b6e66be',
    pB: '0406557e482bd03097ad0cbaa5df82115460d951e3451962f1eaf4367a420676d09857ccbc522686c83d1852abfa8ed6e4a1155cf8f1543ceca528afb591a1e0b7',
    hashTT: '0e0672dc86f8e45565d338b0540abe6915bdf72e2b35b5c9e5663168e960a91b',
    ke: '0e0672dc86f8e45565d338b0540abe69',
    kcA: '00c12546835755c86d8c0db7851ae86f',
    kcB: 'a9fa3406c3b781b93d804485430ca27a',
    macA: '58ad4aa88e0b60d5061eb6b5dd93e80d9c4f00d127c65b3b35b1b5281fee38f0',
    macB: 'd3e2e547f1ae04f2dbdbf0fc4b79f8ecff2dff314b5d32fe9fcef2fb26dc459b',
  },
  {
    idA: '', idB: 'client',
    w: '0548d8729f730589e579b0475a582c1608138ddf7054b73b5381c7e883e2efae',
    x: '403abbe3b1b4b9ba17e3032849759d723939a27a27b9d921c500edde18ed654b',
    pA: '04a897b769e681c62ac1c2357319a3d363f610839c4477720d24cbe32f5fd85f44fb92ba966578c1b712be6962498834078262caa5b441ecfa9d4a9485720e918a',
    y: '903023b6598908936ea7c929bd761af6039577a9c3f9581064187c3049d87065',
    pB: '04e0f816fd1c35e22065d5556215c097e799390d16661c386e0ecc84593974a61b881a8c82327687d0501862970c64565560cb5671f696048050ca66ca5f8cc7fc',
    hashTT: '642f05c473c2cd79909f9a841e2f30a70bf89b18180af97353ba198789c2b963',
    ke: '642f05c473c2cd79909f9a841e2f30a7',
    macA: '47d29e6666af1b7dd450d571233085d7a9866e4d49d2645e2df975489521232b',
    macB: '3313c5cefc361d27fb16847a91c2a73b766ffa90a4839122a9b70a2f6bd1d6df',
  },
  {
    idA: 'server', idB: '',
    w: '626e0cdc7b14c9db3e52a0b1b3a768c98e37852d5db30febe0497b14eae8c254',
    x: '07adb3db6bc623d3399726bfdbfd3d15a58ea776ab8a308b00392621291f9633',
    pA: '04f88fb71c99bfffaea370966b7eb99cd4be0ff1a7d335caac4211c4afd855e2e15a873b298503ad8ba1d9cbb9a392d2ba309b48bfd7879aefd0f2cea6009763b0',
    y: 'b6a4fc8dbb629d4ba51d6f91ed1532cf87adec98f25dd153a75accafafedec16',
    pB: '040c269d6be017dccb15182ac6bfcd9e2a14de019dd587eaf4bdfd353f031101e7cca177f8eb362a6e83e7d5e729c0732e1b528879c086f39ba0f31a9661bd34db',
    hashTT: '005184ff460da2ce59062c87733c299c3521297d736598fc0a1127600efa1afb',
    ke: '005184ff460da2ce59062c87733c299c',
    macA: 'bc9f9bbe99f26d0b2260e6456e05a86196a3307ec6663a18bf6ac825736533b2',
    macB: 'c2370e1bf813b086dff0d834e74425a06e6390f48f5411900276dcccc5a297ec',
  },
  {
    idA: '', idB: '',
    w: '7bf46c454b4c1b25799527d896508afd5fc62ef4ec59db1efb49113063d70cca',
    x: '8cef65df64bb2d0f83540c53632de911b5b24b3eab6cc74a97609fd659e95473',
    pA: '04a65b367a3f613cf9f0654b1b28a1e3a8a40387956c8ba6063e8658563890f46ca1ef6a676598889fc28de2950ab8120b79a5ef1ea4c9f44bc98f585634b46d66',
    y: 'd7a66f64074a84652d8d623a92e20c9675c61cb5b4f6a0063e4648a2fdc02d53',
    pB: '04589f13218822710d98d8b2123a079041052d9941b9cf88c6617ddb2fcc0494662eea8ba6b64692dc318250030c6af045cb738bc81ba35b043c3dcb46adf6f58d',
    hashTT: 'fc6374762ba5cf11f4b2caa08b2cd1b9907ae0e26e8d6234318d91583cd74c86',
    ke: 'fc6374762ba5cf11f4b2caa08b2cd1b9',
    macA: 'dfb4db8d48ae5a675963ea5e6c19d98d4ea028d8e898dad96ea19a80ade95dca',
    macB: 'd0f0609d1613138d354f7e95f19fb556bf52d751947241e8c7118df5ef0ae175',
  },
] as const;

describe('SPAKE2 (RFC 9382)', () => {
  it.each(VECTORS.map((v, i) => [i + 1, v] as const))('reproduces every value of the P-256 test vector %i', (_n, v) => {
    const common = { w: BigInt(`0x${v.w}`), idA: utf8(v.idA), idB: utf8(v.idB) };
    const a = spake2Start({ ...common, role: 'A', secret: BigInt(`0x${v.x}`) });
    const b = spake2Start({ ...common, role: 'B', secret: BigInt(`0x${v.y}`) });
    expect(toHex(a.message)).toBe(v.pA);
    expect(toHex(b.message)).toBe(v.pB);
    const ra = a.finish(b.message);
    const rb = b.finish(a.message);
    expect(toHex(ra.transcriptHash)).toBe(v.hashTT);
    expect(toHex(rb.transcriptHash)).toBe(v.hashTT);
    expect(toHex(ra.sessionKey)).toBe(v.ke);
    if ('kcA' in v) {
      expect(toHex(ra.confirmationKeys.a)).toBe(v.kcA);
      expect(toHex(ra.confirmationKeys.b)).toBe(v.kcB);
    }
    expect(toHex(ra.confirmation)).toBe(v.macA);
    expect(toHex(rb.confirmation)).toBe(v.macB);
    ra.verifyPeerConfirmation(rb.confirmation);
    rb.verifyPeerConfirmation(ra.confirmation);
  });

  it('agrees on a key with random scalars and a password from the code words', () => {
    const w = passwordScalar('orbit-velvet-kiwi', '42');
    const ids = { idA: utf8('member'), idB: utf8('host'), aad: utf8('kiwi/1') };
    const a = spake2Start({ ...ids, role: 'A', w });
    const b = spake2Start({ ...ids, role: 'B', w });
    const ra = a.finish(b.message);
    const rb = b.finish(a.message);
    expect(toHex(ra.sessionKey)).toBe(toHex(rb.sessionKey));
    ra.verifyPeerConfirmation(rb.confirmation);
    rb.verifyPeerConfirmation(ra.confirmation);
  });

  it('fails key confirmation cleanly when the words differ', () => {
    const ids = { idA: utf8('member'), idB: utf8('host') };
    const a = spake2Start({ ...ids, role: 'A', w: passwordScalar('orbit-velvet-kiwi', '42') });
    const b = spake2Start({ ...ids, role: 'B', w: passwordScalar('orbit-velvet-lemon', '42') });
    const ra = a.finish(b.message);
    const rb = b.finish(a.message);
    expect(toHex(ra.sessionKey)).not.toBe(toHex(rb.sessionKey));
    expect(() => rb.verifyPeerConfirmation(ra.confirmation)).toThrow(expect.objectContaining({ code: 'PAKE_CONFIRMATION_FAILED' }));
    expect(() => ra.verifyPeerConfirmation(rb.confirmation)).toThrow(expect.objectContaining({ code: 'PAKE_CONFIRMATION_FAILED' }));
  });

  it('binds the associated data into confirmation', () => {
    const w = passwordScalar('apple-berry-cedar', '7');
    const a = spake2Start({ role: 'A', w, idA: utf8('m'), idB: utf8('h'), aad: utf8('nameplate 7') });
    const b = spake2Start({ role: 'B', w, idA: utf8('m'), idB: utf8('h'), aad: utf8('nameplate 8') });
    const ra = a.finish(b.message);
    const rb = b.finish(a.message);
    expect(() => rb.verifyPeerConfirmation(ra.confirmation)).toThrow(expect.objectContaining({ code: 'PAKE_CONFIRMATION_FAILED' }));
  });

  it.each([
    ['an empty message', new Uint8Array(0)],
    ['a compressed point', hex('02886e2f97ace46e55ba9dd7242579f2993b64e16ef3dcab95afd497333d8fa12f')],
    ['a point off the curve', Uint8Array.from([4, ...new Array<number>(64).fill(0xff)])],
    ['the encoding of zero coordinates', Uint8Array.from([4, ...new Array<number>(64).fill(0)])],
    ['too many bytes', Uint8Array.from([4, ...new Array<number>(80).fill(1)])],
  ])('refuses %s as the peer message', (_what, bytes) => {
    const p = spake2Start({ role: 'A', w: 5n, idA: utf8('a'), idB: utf8('b') });
    let caught: unknown;
    try {
      p.finish(bytes);
    } catch (err) {
      caught = err;
    }
    expect(isKiwiError(caught, 'PAKE_INVALID_MESSAGE')).toBe(true);
  });

  it('refuses a peer message equal to w*N, which would make K the identity', () => {
    // pB = w*N gives pB - w*N = identity: an attacker's attempt to force a known key.
    const w = 12345n;
    const wTimesN = p256.Point.fromHex('03d8bbd6c639c62937b04d997f38c3770719c629d7014d49a24b4f98baa1292b49').multiply(w).toBytes(false);
    const a = spake2Start({ role: 'A', w, idA: utf8('a'), idB: utf8('b') });
    expect(() => a.finish(wTimesN)).toThrow(expect.objectContaining({ code: 'PAKE_INVALID_MESSAGE' }));
  });
});
