// The host's own NAT in its status (control-status.ts host_nat): `none` with its embedded
// rendezvous without a probe; measured against an external rendezvous's STUN service (on loopback
// the rendezvous sees this machine's own address: endpoint-independent, none); not measured when
// that rendezvous runs no STUN service.
import { afterEach, describe, expect, it } from 'vitest';
import { startRendezvous, type Rendezvous } from '../rendezvous/server.js';
import { createHost, type HostSession } from '../session/host.js';
import { sessionStatus } from './control-status.js';

let host: HostSession | undefined;
let rendezvous: Rendezvous | undefined;
afterEach(async () => {
  await host?.close();
  await rendezvous?.close();
  host = undefined;
  rendezvous = undefined;
});

const hostNat = (session: HostSession) =>
  sessionStatus({ hosted: { session, model: null, serving: null, close: async () => {} }, joined: undefined, download: null, error: null }).host_nat;

describe("the host's NAT", () => {
  it('is none with the embedded rendezvous, known at once', async () => {
    host = await createHost({ embeddedRendezvous: { host: '127.0.0.1', port: 0 } });
    expect(host.natCapabilities).toMatchObject({ nat_mapping: 'endpoint-independent', nat_none: true });
    expect(hostNat(host)).toEqual({ mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: null, none: true });
  });

  it('is probed against an external rendezvous', async () => {
    rendezvous = await startRendezvous({ host: '127.0.0.1', port: 0 });
    host = await createHost({ rendezvousUrl: rendezvous.url });
    await host.natMeasured;
    expect(host.natCapabilities).toMatchObject({ nat: 'permissive', nat_mapping: 'endpoint-independent', nat_none: true });
    expect(host.natCapabilities?.rendezvous_rtt_ms).toBeTypeOf('number');
    expect(hostNat(host)).toEqual({ mapping: 'endpoint-independent', filtering: 'lenient', port_mapping: null, none: true });
  });

  it('is not measured when the external rendezvous runs no STUN service', async () => {
    rendezvous = await startRendezvous({ host: '127.0.0.1', port: 0, stun: false });
    host = await createHost({ rendezvousUrl: rendezvous.url });
    await host.natMeasured;
    expect(host.natCapabilities).toBeUndefined();
    expect(hostNat(host)).toBeNull();
  });
});
