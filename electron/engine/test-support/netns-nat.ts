// Home routers emulated with network namespaces and nftables, for NAT-traversal tests and the
// nat-pairs bench. A "public" namespace routes between routers and holds two addresses on its
// loopback (10.79.0.1, 10.79.0.2: a rendezvous with two public addresses, as RFC 5780's mapping
// test needs). Each router namespace has a WAN side (10.79.i.2 on a veth to the public one) and a
// LAN bridge (192.168.i.1/24) with its members (192.168.i.10, .11, ...) behind it; nothing routes
// to a LAN from outside, so a member's host candidates are unreachable from other homes.
//
// The four classic NAT kinds (RFC 3489 names; RFC 4787 mapping / filtering behaviours):
//   full-cone           endpoint-independent mapping, endpoint-independent filtering
//   address-restricted  endpoint-independent mapping, address-dependent filtering
//   port-restricted     endpoint-independent mapping, address-and-port-dependent filtering
//   symmetric           address-and-port-dependent mapping (and filtering)
// Mapping: `masquerade` keeps a member's source port wherever it is free, so one socket keeps one
// public port for every destination (endpoint-independent); `masquerade random` takes a new
// random port per destination (symmetric). Filtering: conntrack alone lets in only replies from
// the exact address and port a member sent to (port-restricted); full-cone and address-restricted
// routers also forward a new inbound UDP packet to the member at the same port (a DNAT in
// prerouting), the address-restricted one only from addresses the member has sent to (a dynamic
// set filled by the member's outgoing packets). Those two kinds take one member each (the DNAT
// names it). Unsolicited packets to the router itself are dropped, as a home router's firewall
// does. Needs root, iproute2 and nftables.
//
// Hairpinning (RFC 4787 §6): a full-cone router with `separateLans` puts each member on a LAN of
// its own (192.168.i.64j+10/26 on its own router interface) and drops forwarding between them, so
// members' host candidates cannot reach each other. Its DNAT is then by mapping owner instead of
// to one member: the forward chain records each outgoing UDP packet's source port and member in a
// dynamic map, and a packet to the router's public address at a mapped port goes to that member.
// With `hairpin` that holds from the LAN side too, and a hairpinned packet is SNATed to the public
// address (its port kept), so the member it reaches sees it from the sender's mapping and replies
// through the router; without, such a packet meets the router's own (closed) port.
import { execFileSync } from 'node:child_process';

export type NatKind = 'full-cone' | 'address-restricted' | 'port-restricted' | 'symmetric';

export const NAT_KINDS: readonly NatKind[] = ['full-cone', 'address-restricted', 'port-restricted', 'symmetric'];

export interface RouterSpec {
  kind: NatKind;
  /** Member names behind this router (one for full-cone and address-restricted). */
  members: readonly string[];
  /** The router also forwards what a port-mapping daemon (miniupnpd, startMiniupnpd) DNATs. */
  portMapping?: boolean;
  /** Each member on a LAN of its own, forwarding between them dropped (full-cone only). */
  separateLans?: boolean;
  /** With separateLans: the router hairpins (a LAN packet to a public mapping reaches its owner). */
  hairpin?: boolean;
}

export interface NatMember {
  name: string;
  ns: string;
  /** Its LAN address. */
  addr: string;
  kind: NatKind;
  /** Its router's index: members that share one share a NAT. */
  router: number;
  /** The router's public (WAN) address. */
  wan: string;
  /** The router's namespace. */
  routerNs: string;
}

export interface NatLab {
  /** The public namespace (rendezvous, host). */
  pub: string;
  /** Its two public addresses. */
  pubAddrs: readonly [string, string];
  members: Record<string, NatMember>;
  /** Command prefix that runs a program in a namespace. */
  exec(ns: string): string[];
  /** Removes every namespace (and with them their interfaces and nftables tables); idempotent. */
  tearDown(): void;
}

const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });
const nft = (ns: string, script: string): void => void execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: script, stdio: ['pipe', 'pipe', 'pipe'] });

/** The router's nftables ruleset for one kind; `wan` is its WAN interface, `member` the address a DNAT forwards to. */
export function routerRules(kind: NatKind, wan: string, member: string | undefined, portMapping = false): string {
  const dnat = kind === 'full-cone' || kind === 'address-restricted';
  if (dnat && member === undefined) throw new Error(`bug: a ${kind} router forwards to one member, and it has none`);
  return `table ip kiwi_router {
  set contacted { type ipv4_addr; flags dynamic, timeout; timeout 5m; }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    ${kind === 'full-cone' ? `iifname "${wan}" udp dport 1024-65535 dnat to ${member}` : ''}
    ${kind === 'address-restricted' ? `iifname "${wan}" ip saddr @contacted udp dport 1024-65535 dnat to ${member}` : ''}
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "${wan}" masquerade${kind === 'symmetric' ? ' random' : ''}
  }
  chain forwarding {
    type filter hook forward priority filter; policy drop;
    iifname != "${wan}" ${kind === 'address-restricted' ? 'update @contacted { ip daddr } ' : ''}accept
    ct state established,related accept
    ${dnat || portMapping ? 'ct status dnat accept' : ''}
  }
  chain incoming {
    type filter hook input priority filter; policy accept;
    iifname "${wan}" ct state new drop
  }
}
`;
}

/** The ruleset of a full-cone router with a LAN per member (see the header), hairpinning or not. */
export function separateLanRules(wan: string, wanAddr: string, hairpin: boolean): string {
  const lan = `iifname != "${wan}" oifname != "${wan}"`;
  return `table ip kiwi_router {
  map owner { type inet_service : ipv4_addr; flags dynamic, timeout; timeout 5m; }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "${wan}" ip daddr ${wanAddr} udp dport @owner dnat ip to udp dport map @owner
    ${hairpin ? `iifname != "${wan}" ip daddr ${wanAddr} udp dport @owner counter dnat ip to udp dport map @owner` : ''}
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "${wan}" masquerade
    ${hairpin ? `${lan} ct status dnat snat ip to ${wanAddr}` : ''}
  }
  chain forwarding {
    type filter hook forward priority filter; policy drop;
    ${hairpin ? `${lan} ct status dnat accept` : ''}
    ${lan} drop
    oifname "${wan}" meta l4proto udp update @owner { udp sport : ip saddr }
    iifname != "${wan}" accept
    ct state established,related accept
    ct status dnat accept
  }
  chain incoming {
    type filter hook input priority filter; policy accept;
    iifname "${wan}" ct state new drop
  }
}
`;
}

/** Packets a hairpinning router has DNATed from a LAN back to a mapping's owner; from its rule's counter. */
export function hairpinnedPackets(routerNs: string): number {
  const out = execFileSync('ip', ['netns', 'exec', routerNs, 'nft', 'list', 'chain', 'ip', 'kiwi_router', 'prerouting'], { encoding: 'utf8' });
  const m = /@owner counter packets (\d+)/.exec(out);
  if (m === null) throw new Error(`bug: ${routerNs} is not a hairpinning router`);
  return Number(m[1]);
}

/**
 * Builds the lab: the public namespace and one router (with its members) per spec. Namespace and
 * interface names carry `tag`, so parallel test files do not collide. On any failure everything
 * made so far is removed before the error is thrown.
 */
export function createNatLab(routers: readonly RouterSpec[], tag = String(process.pid % 100000)): NatLab {
  const created: string[] = [];
  const tearDown = (): void => {
    for (const n of created.splice(0).reverse()) {
      try {
        ip('netns', 'del', n);
      } catch {
        // Already gone: nothing to remove.
      }
    }
  };
  const addNs = (name: string): string => {
    ip('netns', 'add', name);
    created.push(name);
    ip('-n', name, 'link', 'set', 'lo', 'up');
    return name;
  };
  const veth = (a: string, aNs: string, aAddr: string | undefined, b: string, bNs: string, bAddr: string | undefined): void => {
    ip('link', 'add', a, 'type', 'veth', 'peer', 'name', b);
    ip('link', 'set', a, 'netns', aNs);
    ip('link', 'set', b, 'netns', bNs);
    if (aAddr !== undefined) ip('-n', aNs, 'addr', 'add', aAddr, 'dev', a);
    if (bAddr !== undefined) ip('-n', bNs, 'addr', 'add', bAddr, 'dev', b);
    ip('-n', aNs, 'link', 'set', a, 'up');
    ip('-n', bNs, 'link', 'set', b, 'up');
  };
  const members: Record<string, NatMember> = {};
  const pubAddrs = ['10.79.0.1', '10.79.0.2'] as const;
  const pub = `kiwi-pub-${tag}`;
  try {
    addNs(pub);
    for (const a of pubAddrs) ip('-n', pub, 'addr', 'add', `${a}/32`, 'dev', 'lo');
    execFileSync('ip', ['netns', 'exec', pub, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'], { stdio: 'pipe' });
    routers.forEach((spec, r) => {
      const i = r + 1;
      if (spec.members.length === 0) throw new Error('bug: a router without members');
      const router = addNs(`kiwi-nat${i}-${tag}`);
      const wan = `k${tag}w${i}`;
      veth(`k${tag}p${i}`, pub, `10.79.${i}.1/24`, wan, router, `10.79.${i}.2/24`);
      ip('-n', router, 'route', 'add', 'default', 'via', `10.79.${i}.1`);
      execFileSync('ip', ['netns', 'exec', router, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'], { stdio: 'pipe' });
      if (spec.separateLans === true) {
        if (spec.kind !== 'full-cone') throw new Error(`bug: separate LANs are built for a full-cone router, not ${spec.kind}`);
        spec.members.forEach((name, j) => {
          const ns = addNs(`kiwi-m${i}${j}-${tag}`);
          const [gw, addr] = [`192.168.${i}.${64 * j + 1}`, `192.168.${i}.${64 * j + 10}`];
          veth(`k${tag}l${i}${j}`, router, `${gw}/26`, `k${tag}m${i}${j}`, ns, `${addr}/26`);
          ip('-n', ns, 'route', 'add', 'default', 'via', gw);
          members[name] = { name, ns, addr, kind: spec.kind, router: i, wan: `10.79.${i}.2`, routerNs: router };
        });
        nft(router, separateLanRules(wan, `10.79.${i}.2`, spec.hairpin === true));
        return;
      }
      ip('-n', router, 'link', 'add', 'br0', 'type', 'bridge');
      ip('-n', router, 'addr', 'add', `192.168.${i}.1/24`, 'dev', 'br0');
      ip('-n', router, 'link', 'set', 'br0', 'up');
      spec.members.forEach((name, j) => {
        const ns = addNs(`kiwi-m${i}${j}-${tag}`);
        const addr = `192.168.${i}.${10 + j}`;
        const port = `k${tag}l${i}${j}`;
        veth(port, router, undefined, `k${tag}m${i}${j}`, ns, `${addr}/24`);
        ip('-n', router, 'link', 'set', port, 'master', 'br0');
        ip('-n', ns, 'route', 'add', 'default', 'via', `192.168.${i}.1`);
        members[name] = { name, ns, addr, kind: spec.kind, router: i, wan: `10.79.${i}.2`, routerNs: router };
      });
      const dnatTo = spec.kind === 'full-cone' || spec.kind === 'address-restricted' ? `192.168.${i}.10` : undefined;
      if (dnatTo !== undefined && spec.members.length > 1) throw new Error(`bug: a ${spec.kind} router takes one member`);
      nft(router, routerRules(spec.kind, wan, dnatTo, spec.portMapping === true));
    });
  } catch (err) {
    tearDown();
    throw err;
  }
  return { pub, pubAddrs, members, exec: (ns) => ['ip', 'netns', 'exec', ns], tearDown };
}
