// When the network-namespace tests run, skip or fail: they skip, saying why, only where namespaces
// cannot be made (KIWI_TEST_NO_NETNS, not Linux, not root, refused by the kernel or container);
// a missing ip or nft is an error that names the package to install.
import { describe, expect, it } from 'vitest';
import { requireNft } from './netns-faults.js';
import { netnsSupport, type NetnsProbe } from './netns-star.js';

const enoent = (): never => {
  throw Object.assign(new Error('spawnSync ip ENOENT'), { code: 'ENOENT' });
};

function probe(over: Partial<NetnsProbe>): NetnsProbe {
  return { env: {}, platform: 'linux', uid: 0, run: () => undefined, ...over };
}

describe('netnsSupport', () => {
  it('uses namespaces as root on Linux when one can be made (and removes its probe)', () => {
    const calls: string[] = [];
    expect(netnsSupport(probe({ run: (c, a) => void calls.push([c, ...a].join(' ')) }))).toEqual({ usable: true, why: '' });
    expect(calls).toEqual([expect.stringMatching(/^ip netns add kiwi-probe-\d+$/), expect.stringMatching(/^ip netns del kiwi-probe-\d+$/)]);
  });

  it('skips, saying why, where namespaces cannot be made', () => {
    expect(netnsSupport(probe({ env: { KIWI_TEST_NO_NETNS: '1' } })).why).toMatch(/KIWI_TEST_NO_NETNS/);
    expect(netnsSupport(probe({ platform: 'darwin' }))).toEqual({ usable: false, why: expect.stringMatching(/Linux only/) });
    expect(netnsSupport(probe({ uid: 1000 }))).toEqual({ usable: false, why: expect.stringMatching(/need root/) });
    const refused = (): never => {
      throw Object.assign(new Error('Command failed'), { stderr: Buffer.from('mount --make-shared /run/netns failed: Operation not permitted\n') });
    };
    expect(netnsSupport(probe({ run: refused }))).toEqual({ usable: false, why: expect.stringMatching(/refuses a network namespace.*Operation not permitted.*CAP_SYS_ADMIN/) });
  });

  it('fails with the install command when ip or nft is missing', () => {
    expect(() => netnsSupport(probe({ run: enoent }))).toThrow(/apt-get install iproute2/);
    expect(() => requireNft(enoent)).toThrow(/apt-get install nftables/);
    expect(() => requireNft(() => undefined)).not.toThrow();
  });
});
