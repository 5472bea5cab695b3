import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { checkHello, type HelloContext } from './host-hello.js';
import { fingerprint, generateIdentity, signHello } from './identity.js';
import { toB64 } from './session-messages.js';

const ada = generateIdentity();
const bob = generateIdentity();
const transcriptHash = new Uint8Array(32).fill(5);
const context: HelloContext = { nameplate: 42, peer: 3, transcriptHash, expectedMemberId: undefined };

function hello(signer = ada, claimed = ada.memberId, signedFor: Pick<HelloContext, 'nameplate' | 'peer' | 'transcriptHash'> = context) {
  return {
    type: 'hello' as const, memberId: claimed, name: 'ada', addresses: [],
    publicKey: toB64(signer.publicKey), signature: toB64(signHello(signer, signedFor.nameplate, signedFor.peer, signedFor.transcriptHash)),
  };
}

function refusal(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('the host\'s check of a hello', () => {
  it('accepts a hello signed for this connection and gives the member\'s fingerprint', () => {
    expect(checkHello(hello(), context)).toBe(fingerprint(ada.publicKey, transcriptHash));
  });

  it('accepts a rejoin that says hello as the member it resumed', () => {
    expect(checkHello(hello(), { ...context, expectedMemberId: ada.memberId })).toBe(fingerprint(ada.publicKey, transcriptHash));
  });

  it.each([
    ['a rejoin of one member that says hello as another', hello(bob, bob.memberId), { ...context, expectedMemberId: ada.memberId }],
    ['a member id its key does not own', hello(bob, ada.memberId), context],
    ['a signature over another connection\'s transcript', hello(ada, ada.memberId, { ...context, transcriptHash: new Uint8Array(32).fill(6) }), context],
    ['a signature for another peer number', hello(ada, ada.memberId, { ...context, peer: 4 }), context],
  ] as const)('refuses %s (IDENTITY_INVALID)', (_what, msg, ctx) => {
    expect(isKiwiError(refusal(() => checkHello(msg, ctx)), 'IDENTITY_INVALID')).toBe(true);
  });
});
