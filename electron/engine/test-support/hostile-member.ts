// A hostile ring member for tests: it joins a session as a real member (the engine's own
// MemberSession: PAKE, control link, ring links), claims a layer range without loading anything,
// and when the first step reaches it answers with a crafted message on its ring links instead of
// running the step. Nothing in the product can be made to do this; only this script does.
//
//   node --import tsx electron/engine/test-support/hostile-member.ts CODE RENDEZVOUS NAME ATTACK HIDDEN [CAPABILITIES_FILE]
//
// It prints JSON lines: {"event":"joined"}, {"event":"assigned",...}, {"event":"attacked","attack":...,"bytes":N}.
import { readFile } from 'node:fs/promises';
import { decodeStepFrame } from '../transport/tensor-frame.js';
import { HostToMemberBody, parsePipelineBody, parseStepMetadata, RingKind, type Assign } from '../pipeline/ring-protocol.js';
import { ATTACKS, crafted, type Attack } from './hostile-attacks.js';
import { MemberSession, type JoinOptions } from '../session/member.js';

const print = (event: string, fields: Record<string, unknown> = {}): void => {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
};

async function main(): Promise<void> {
  const [code, rendezvousUrl, name, attack, hiddenText, capabilitiesFile] = process.argv.slice(2);
  const modelHidden = Number(hiddenText);
  if (code === undefined || rendezvousUrl === undefined || name === undefined || !ATTACKS.includes(attack as Attack) || !(modelHidden > 0)) {
    throw new Error(`usage: hostile-member.ts CODE RENDEZVOUS NAME (${ATTACKS.join('|')}) HIDDEN [CAPABILITIES]`);
  }
  const capabilities = capabilitiesFile !== undefined ? (JSON.parse(await readFile(capabilitiesFile, 'utf8')) as JoinOptions['capabilities']) : undefined;
  const session = new MemberSession({ code, rendezvousUrl, name, heartbeatMs: 500, listenHost: '127.0.0.1', ...(capabilities !== undefined ? { capabilities } : {}) });
  let assignment: Assign | undefined;
  let attacked = false;
  const attachedLinks = new WeakSet<object>();
  const attach = (peer: number): void => {
    const link = session.ringLink(peer);
    if (link === undefined || attachedLinks.has(link)) return;
    attachedLinks.add(link);
    link.onMessage((bytes) => {
      const a = assignment;
      if (a === undefined || peer !== a.prev || bytes[0] !== RingKind.STEP || attacked) return;
      const msg = bytes.slice();
      void (async () => {
        const frame = await decodeStepFrame(msg.subarray(1), { maxBytes: 1 << 26 });
        const { step, rows, epoch } = parseStepMetadata(frame.metadata, frame.tensor.dims[0]);
        if (epoch !== a.epoch) return;
        attacked = true;
        const hidden = modelHidden;
        const messages = await crafted(attack as Attack, a, step, rows, frame.tensor.dims[1], hidden);
        // To the next stage (whose input this is), and the same to the previous one (who must not read it).
        let bytesSent = 0;
        for (const m of messages) {
          for (const to of new Set([a.next, a.prev])) {
            const l = session.ringLink(to);
            if (l !== undefined && !l.closed) {
              l.send(m);
              bytesSent += m.length;
            }
          }
        }
        print('attacked', { attack, step, messages: messages.length, bytes: bytesSent });
      })().catch((err: unknown) => print('attack-failed', { message: String(err) }));
    });
  };
  session.on('link', (s) => {
    if (s.state === 'up') attach(s.peer);
  });
  session.on('pipeline', (raw) => {
    const body = parsePipelineBody(HostToMemberBody, raw);
    if (body.kind === 'assign') {
      assignment = body;
      attacked = false;
      print('assigned', { start: body.start, end: body.end, epoch: body.epoch, prev: body.prev, next: body.next });
      session.send({ type: 'pipeline', body: { kind: 'assigned', epoch: body.epoch, start: body.start, end: body.end } });
      for (const s of session.linkStatuses()) if (s.state === 'up') attach(s.peer);
    } else if (body.kind === 'weights-plan' && assignment?.epoch === body.epoch) {
      // Claims its own copy of the model: nothing is loaded, nothing will run.
      session.send({ type: 'pipeline', body: { kind: 'ready', epoch: body.epoch, source: 'local', transferredBytes: 0, loadMs: 1 } });
    }
  });
  session.on('fatal', (err) => {
    print('fatal', { code: err.code, message: err.message });
    process.exit(1);
  });
  await session.connect();
  print('joined', { peer: session.peer, member_id: session.memberId });
}

main().catch((err: unknown) => {
  print('error', { message: String(err) });
  process.exit(1);
});
