// The host's encrypted control connections, one per admitted rendezvous peer: each opens over the
// rendezvous relay with its PAKE's session key, decodes what arrives (a message that does not
// decode closes that connection with its code), and learns the member it belongs to at its hello.
// One live connection per identity: a newer connection of a member replaces the older one.
import { isKiwiError, type KiwiError } from '../errors.js';
import { RelayChannel } from '../rendezvous/protocol.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import type { RendezvousClient } from './rendezvous-client.js';
import { BINARY_CONTROL, decodeControl, encodeControl, MemberToHost, type HostToMember } from './session-messages.js';
import { controlContext, REPLACED_REASON } from './session-params.js';
import type { Spake2Result } from './spake2.js';

export interface ControlConnection {
  peer: number;
  link: SecureLink;
  /** Set by its hello. */
  memberId: string | undefined;
  /** The PAKE transcript of this connection, which the hello signs. */
  transcriptHash: Uint8Array;
  /** Set for a rejoin: the only identity this connection may say hello as. */
  expectedMemberId: string | undefined;
}

export interface ControlHandlers {
  /** A decoded message; a KiwiError it throws closes the connection (and is a warning). */
  message: (conn: ControlConnection, msg: MemberToHost) => void;
  warning: (err: KiwiError) => void;
  /** The last connection of a member closed. */
  disconnected: (memberId: string) => void;
}

const OPEN_TIMEOUT_MS = 10_000;

export class ControlConnections {
  private readonly byPeer = new Map<number, ControlConnection>();

  constructor(
    private readonly client: RendezvousClient,
    private readonly nameplate: number,
    private readonly on: ControlHandlers,
  ) {}

  /** Opens the control link of an admitted peer; a link that cannot be opened is a warning. */
  async open(peer: number, pake: Spake2Result, expectedMemberId: string | undefined): Promise<void> {
    let link: SecureLink;
    try {
      link = await openSecureLink(this.client.relayLink(peer, RelayChannel.CONTROL), {
        role: 'responder', secret: { secret: pake.sessionKey, context: controlContext(this.nameplate, peer) }, timeoutMs: OPEN_TIMEOUT_MS,
      });
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.on.warning(err);
      return;
    }
    const conn: ControlConnection = { peer, link, memberId: undefined, transcriptHash: pake.transcriptHash, expectedMemberId };
    this.byPeer.set(peer, conn);
    link.onMessage((bytes) => {
      try {
        this.on.message(conn, decodeControl(MemberToHost, bytes));
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        this.on.warning(err);
        link.close(err.code);
      }
    });
    link.onClose(() => {
      if (this.byPeer.get(peer) === conn) this.byPeer.delete(peer);
      // A member that already reconnected on another connection is not disconnected.
      const id = conn.memberId;
      if (id !== undefined && ![...this.byPeer.values()].some((c) => c.memberId === id)) this.on.disconnected(id);
    });
  }

  get(peer: number): ControlConnection | undefined {
    return this.byPeer.get(peer);
  }

  /** The open connection of a member that said hello. */
  ofMember(memberId: string): ControlConnection | undefined {
    for (const conn of this.byPeer.values()) if (conn.memberId === memberId && !conn.link.closed) return conn;
    return undefined;
  }

  /** The connections whose member said hello. */
  greeted(): ControlConnection[] {
    return [...this.byPeer.values()].filter((c) => c.memberId !== undefined);
  }

  /** `conn` belongs to `memberId` from now on; an older connection of the same member closes. */
  claim(conn: ControlConnection, memberId: string): void {
    for (const other of this.byPeer.values()) if (other !== conn && other.memberId === memberId) other.link.close(REPLACED_REASON);
    conn.memberId = memberId;
  }

  send(conn: ControlConnection, msg: HostToMember): void {
    if (!conn.link.closed) conn.link.send(encodeControl(msg));
  }

  /** Binary pipeline data (weights): BINARY_CONTROL, then the bytes. */
  sendBytes(conn: ControlConnection, bytes: Uint8Array): void {
    const msg = new Uint8Array(1 + bytes.length);
    msg[0] = BINARY_CONTROL;
    msg.set(bytes, 1);
    conn.link.send(msg);
  }

  closeAll(reason: string): void {
    for (const c of this.byPeer.values()) c.link.close(reason);
  }
}
