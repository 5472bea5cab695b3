// Network faults for rings in network namespaces (netns-star.ts): cut a participant off (its veth
// down: a partition, not a crash) and heal it, or drop a share of its packets at random with
// nftables (`numgen random`; this kernel has no sch_netem, so `tc netem loss` is not available).
// The test process itself joins the star's bridge (a veth from the root namespace), so it reaches
// the host's API over the star like any client on the LAN. Needs root, iproute2 and, for loss, nft
// (Debian package nftables).
import { execFileSync } from 'node:child_process';
import { createNetnsStar, missingPackage, type NetnsStar } from './netns-star.js';

const ip = (...args: string[]): string => execFileSync('ip', args, { stdio: 'pipe', encoding: 'utf8' });

/** Throws, saying what to install, unless `nft` (nftables) is installed: where namespaces work, nothing else excuses these tests. */
export function requireNft(run: (command: string, args: string[]) => void = (c, a) => void execFileSync(c, a, { stdio: 'ignore' })): void {
  try {
    run('nft', ['--version']);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw missingPackage('nft', 'nftables', 'The network-fault tests');
    throw err;
  }
}

export interface FaultStar extends NetnsStar {
  /** This process's address on the star (reach the host's `--lan` API through it). */
  rootAddr: string;
  /** Takes the participant's interface down: every packet to or from it is lost until heal(). */
  partition(name: string): void;
  heal(name: string): void;
  /** Drops `percent` of the packets the participant sends and receives, at random (nftables). */
  loss(name: string, percent: number): void;
  clearLoss(name: string): void;
  /** Refuses (TCP reset) every packet the participant sends anywhere but `addr`, so all its traffic takes that path. */
  onlyThrough(name: string, addr: string): void;
  clearOnlyThrough(name: string): void;
}

/** The star's interface inside a participant's namespace (the one that is not loopback). */
function starInterface(ns: string): string {
  const names = ip('-n', ns, '-o', 'link', 'show').split('\n').map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1]).filter((n): n is string => n !== undefined && n !== 'lo');
  if (names[0] === undefined) throw new Error(`no interface besides lo in namespace ${ns}`);
  return names[0];
}

export function createFaultStar(names: readonly string[], tag = String(process.pid % 100000)): FaultStar {
  const star = createNetnsStar(names, tag);
  const hub = `kiwi-hub-${tag}`;
  const rootDev = `kf${tag}r`;
  const rootAddr = '10.78.0.254';
  try {
    ip('link', 'add', rootDev, 'type', 'veth', 'peer', 'name', `${rootDev}h`);
    ip('link', 'set', `${rootDev}h`, 'netns', hub);
    ip('-n', hub, 'link', 'set', `${rootDev}h`, 'master', 'br0');
    ip('-n', hub, 'link', 'set', `${rootDev}h`, 'up');
    ip('addr', 'add', `${rootAddr}/24`, 'dev', rootDev);
    ip('link', 'set', rootDev, 'up');
  } catch (err) {
    star.tearDown();
    throw err;
  }
  const nsOf = (name: string): string => {
    const ns = star.ns[name];
    if (ns === undefined) throw new Error(`no participant ${name} in the star`);
    return ns;
  };
  const nft = (name: string, ...args: string[]): void => void execFileSync('ip', ['netns', 'exec', nsOf(name), 'nft', ...args], { stdio: 'pipe' });
  return {
    ...star,
    rootAddr,
    partition: (name) => void ip('-n', nsOf(name), 'link', 'set', starInterface(nsOf(name)), 'down'),
    heal: (name) => void ip('-n', nsOf(name), 'link', 'set', starInterface(nsOf(name)), 'up'),
    loss(name, percent) {
      if (!Number.isInteger(percent) || percent < 0 || percent > 100) throw new Error(`loss must be a whole percentage, got ${percent}`);
      this.clearLoss(name);
      nft(name, 'add', 'table', 'inet', 'kiwi_faults');
      for (const hook of ['input', 'output']) {
        nft(name, 'add', 'chain', 'inet', 'kiwi_faults', hook, `{ type filter hook ${hook} priority 0; policy accept; }`);
        // Loopback stays whole: only the star's link is lossy.
        nft(name, 'add', 'rule', 'inet', 'kiwi_faults', hook, hook === 'input' ? 'iifname' : 'oifname', '!=', 'lo', 'numgen', 'random', 'mod', '100', '<', String(percent), 'drop');
      }
    },
    clearLoss(name) {
      try {
        nft(name, 'delete', 'table', 'inet', 'kiwi_faults');
      } catch {
        // No table yet: nothing to clear.
      }
    },
    onlyThrough(name, addr) {
      this.clearOnlyThrough(name);
      nft(name, 'add', 'table', 'inet', 'kiwi_route');
      nft(name, 'add', 'chain', 'inet', 'kiwi_route', 'output', '{ type filter hook output priority 0; policy accept; }');
      nft(name, 'add', 'rule', 'inet', 'kiwi_route', 'output', 'oifname', '!=', 'lo', 'ip', 'daddr', '!=', addr, 'meta', 'l4proto', 'tcp', 'reject', 'with', 'tcp', 'reset');
    },
    clearOnlyThrough(name) {
      try {
        nft(name, 'delete', 'table', 'inet', 'kiwi_route');
      } catch {
        // No table yet: nothing to clear.
      }
    },
    tearDown() {
      try {
        ip('link', 'del', rootDev);
      } catch {
        // Gone with the hub already.
      }
      star.tearDown();
    },
  };
}
