// Network namespaces for multi-machine tests and benchmarks on one Linux box: one namespace per
// participant, each joined by a veth pair to a bridge in a hub namespace (10.78.0.0/24). Needs root
// and iproute2: the tests skip, saying why, only where namespaces cannot be made (not Linux, not
// root, a container without CAP_SYS_ADMIN), and fail with the install command when `ip` is missing.
// (Delays with `tc netem` need the sch_netem kernel module, which this CI lacks.)
import { execFileSync } from 'node:child_process';

export interface NetnsSupport {
  usable: boolean;
  /** Why not, for the test's title ('' when usable). */
  why: string;
}

export interface NetnsProbe {
  env: NodeJS.ProcessEnv;
  platform: NodeJS.Platform;
  uid: number | undefined;
  /** Runs a command; throws as execFileSync does (code ENOENT when it is not installed). */
  run(command: string, args: string[]): void;
}

const realProbe: NetnsProbe = {
  env: process.env,
  platform: process.platform,
  uid: process.getuid?.(),
  run: (command, args) => void execFileSync(command, args, { stdio: 'pipe' }),
};

/** The message a test fails with when a package it needs is missing: what to install. */
export function missingPackage(command: string, pkg: string, what: string): Error {
  return new Error(
    `${what} need the '${command}' command, which is not installed: apt-get install ${pkg} (Debian/Ubuntu). ` +
      'Set KIWI_TEST_NO_NETNS=1 to run without network namespaces.',
  );
}

/**
 * Whether this machine can make network namespaces. Skipped (with the reason) only where it
 * cannot: not Linux, not root, or the kernel/container refuses a namespace; a missing `ip`
 * (iproute2) is no reason to skip but an error that says what to install.
 */
export function netnsSupport(probe: NetnsProbe = realProbe): NetnsSupport {
  if (probe.env.KIWI_TEST_NO_NETNS === '1') return { usable: false, why: 'KIWI_TEST_NO_NETNS=1' };
  if (probe.platform !== 'linux') return { usable: false, why: `network namespaces are Linux only (this is ${probe.platform})` };
  if (probe.uid !== 0) return { usable: false, why: 'network namespaces need root (run the tests as root, e.g. in CI\'s container)' };
  const name = `kiwi-probe-${process.pid % 100000}`;
  try {
    probe.run('ip', ['netns', 'add', name]);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw missingPackage('ip', 'iproute2', 'The network-namespace tests');
    const detail = String((err as { stderr?: Buffer | string }).stderr ?? (err as Error).message).trim().split('\n')[0];
    return { usable: false, why: `this machine refuses a network namespace (ip netns add: ${detail}); a container needs CAP_SYS_ADMIN` };
  }
  probe.run('ip', ['netns', 'del', name]);
  return { usable: true, why: '' };
}

let support: NetnsSupport | undefined;

/** netnsSupport() of this machine, probed once per test file. */
export function canUseNetns(): boolean {
  support ??= netnsSupport();
  return support.usable;
}

/** Why this machine cannot make network namespaces ('' when it can). */
export function netnsWhyNot(): string {
  return canUseNetns() ? '' : (support?.why ?? '');
}

/** ' (skipped: why)' for a test title, or '' when namespaces can be used. */
export function netnsSkipNote(): string {
  return canUseNetns() ? '' : ` (skipped: ${netnsWhyNot()})`;
}

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });

export interface NetnsStar {
  /** Namespace name of each participant. */
  ns: Record<string, string>;
  /** IPv4 address of each participant. */
  addr: Record<string, string>;
  /** Command prefix that runs a program inside a participant's namespace. */
  exec(name: string): string[];
  tearDown(): void;
}

export function createNetnsStar(names: readonly string[], tag = String(process.pid % 100000)): NetnsStar {
  const hub = `kiwi-hub-${tag}`;
  const ns: Record<string, string> = {};
  const addr: Record<string, string> = {};
  const dev: Record<string, string> = {};
  const created: string[] = [];
  const tearDown = (): void => {
    for (const n of created.splice(0)) {
      try {
        ip('netns', 'del', n);
      } catch {
        // Already gone: nothing to remove.
      }
    }
  };
  try {
    ip('netns', 'add', hub);
    created.push(hub);
    ip('-n', hub, 'link', 'add', 'br0', 'type', 'bridge');
    ip('-n', hub, 'link', 'set', 'br0', 'up');
    names.forEach((name, i) => {
      ns[name] = `kiwi-${name}-${tag}`;
      addr[name] = `10.78.0.${i + 1}`;
      dev[name] = `r${tag}n${i}`;
      ip('netns', 'add', ns[name]);
      created.push(ns[name]);
      const outer = `${dev[name]}h`;
      ip('link', 'add', dev[name], 'type', 'veth', 'peer', 'name', outer);
      ip('link', 'set', dev[name], 'netns', ns[name]);
      ip('link', 'set', outer, 'netns', hub);
      ip('-n', hub, 'link', 'set', outer, 'master', 'br0');
      ip('-n', hub, 'link', 'set', outer, 'up');
      ip('-n', ns[name], 'addr', 'add', `${addr[name]}/24`, 'dev', dev[name]);
      ip('-n', ns[name], 'link', 'set', dev[name], 'up');
      ip('-n', ns[name], 'link', 'set', 'lo', 'up');
    });
  } catch (err) {
    tearDown();
    throw err;
  }
  return {
    ns,
    addr,
    exec: (name) => ['ip', 'netns', 'exec', ns[name]!],
    tearDown,
  };
}
