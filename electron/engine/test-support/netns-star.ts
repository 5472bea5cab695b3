// Network namespaces for multi-machine tests and benchmarks on one Linux box: one namespace per
// participant, each joined by a veth pair to a bridge in a hub namespace (10.78.0.0/24). Needs root
// and iproute2. (Delays with `tc netem` need the sch_netem kernel module, which this CI lacks.)
import { execFileSync } from 'node:child_process';

export function canUseNetns(): boolean {
  if (process.env.KIWI_TEST_NO_NETNS === '1' || process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
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
