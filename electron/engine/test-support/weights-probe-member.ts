// A ring member for the weights-token tests: it joins a session as a real member (the engine's
// own MemberSession: PAKE, control link, ring links), takes its assignment, prints the weights
// plan it gets (the host's range-server URLs and this member's own token, so a test can try the
// token on bytes inside and outside its layers) and claims its own copy of the model. `leave` on
// stdin asks the host to plan it out; `released` is printed when the host lets it go.
//
//   node --import tsx electron/engine/test-support/weights-probe-member.ts CODE RENDEZVOUS NAME [CAPABILITIES_FILE]
//
// It prints JSON lines: {"event":"joined"}, {"event":"assigned",...}, {"event":"weights-plan",...}, {"event":"released"}.
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { HostToMemberBody, parsePipelineBody } from '../pipeline/ring-protocol.js';
import { MemberSession, type JoinOptions } from '../session/member.js';

const print = (event: string, fields: Record<string, unknown> = {}): void => {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
};

async function main(): Promise<void> {
  const [code, rendezvousUrl, name, capabilitiesFile] = process.argv.slice(2);
  if (code === undefined || rendezvousUrl === undefined || name === undefined) throw new Error('usage: weights-probe-member.ts CODE RENDEZVOUS NAME [CAPABILITIES]');
  const capabilities = capabilitiesFile !== undefined ? (JSON.parse(await readFile(capabilitiesFile, 'utf8')) as JoinOptions['capabilities']) : undefined;
  const session = new MemberSession({ code, rendezvousUrl, name, heartbeatMs: 500, listenHost: '127.0.0.1', ...(capabilities !== undefined ? { capabilities } : {}) });
  let epoch: number | undefined;
  session.on('pipeline', (raw) => {
    const body = parsePipelineBody(HostToMemberBody, raw);
    if (body.kind === 'assign') {
      epoch = body.epoch;
      print('assigned', { start: body.start, end: body.end, epoch: body.epoch });
      session.send({ type: 'pipeline', body: { kind: 'assigned', epoch: body.epoch, start: body.start, end: body.end } });
    } else if (body.kind === 'weights-plan' && body.epoch === epoch) {
      print('weights-plan', { epoch: body.epoch, urls: body.http?.urls ?? null, token: body.http?.token ?? null, spans: body.spans.map((s) => ({ offset: s.offset, bytes: s.bytes })) });
      session.send({ type: 'pipeline', body: { kind: 'ready', epoch: body.epoch, source: 'local', transferredBytes: 0, loadMs: 1 } });
    } else if (body.kind === 'released') {
      print('released');
    }
  });
  session.on('fatal', (err) => {
    print('fatal', { code: err.code, message: err.message });
    process.exit(1);
  });
  createInterface({ input: process.stdin, terminal: false }).on('line', (line) => {
    if (line.trim() === 'leave') session.send({ type: 'pipeline', body: { kind: 'leaving' } });
  });
  await session.connect();
  print('joined', { peer: session.peer, member_id: session.memberId });
}

main().catch((err: unknown) => {
  print('error', { message: String(err) });
  process.exit(1);
});
