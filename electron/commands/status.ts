// `kiwi status`: asks a running `kiwi host` or `kiwi join` of this user what its session is doing,
// over its control API on loopback (GET /api/status). The address and token come from the 0600
// file the running process wrote (engine/server/control-file.ts), never from the command line.
import type { SessionStatus } from '../../common/control-api.js';
import { SessionStatus as SessionStatusSchema } from '../../common/control-api.js';
import { natClassText } from '../../common/nat-text.js';
import { layerRangeText } from '../../common/ring-layout.js';
import { KiwiError } from '../engine/errors.js';
import { findControlFile, kiwiRuntimeDir, type ControlFile } from '../engine/server/control-file.js';
import { booleanOption, defineCommand, stringOption, writeJson } from './command.js';

export const statusCommand = defineCommand({
  name: 'status',
  summary: 'Show what a running host or member is doing: members, stages, links, phase, tokens/s',
  description:
    'Asks a `kiwi host` or `kiwi join` running as this user on this machine, over its control API on loopback. ' +
    'The token is read from the file the running process wrote (mode 0600; `kiwi host`/`join` print where). ' +
    'Without --host: the only one running, else the only host. --json prints GET /api/status as one JSON object.',
  positionals: [],
  options: {
    host: { type: 'string', valueName: 'URL', description: 'Control API of the process to ask (as `kiwi host`/`join` print it, e.g. http://127.0.0.1:PORT/api)' },
    json: { type: 'boolean', description: 'Print the status as one JSON object' },
  },
  async run(ctx) {
    const target = await findControlFile(stringOption(ctx, 'host'), kiwiRuntimeDir());
    const status = await fetchStatus(target);
    if (booleanOption(ctx, 'json')) writeJson(ctx.stdout, { api_url: target.url, pid: target.pid, ...status });
    else ctx.stdout.write(formatStatus(status, target));
    return 0;
  },
});

async function fetchStatus(target: ControlFile): Promise<SessionStatus> {
  let res: Response;
  try {
    res = await fetch(`${target.url}/status`, { headers: { authorization: `Bearer ${target.token}` }, signal: AbortSignal.timeout(10_000) });
  } catch (err) {
    throw new KiwiError('SESSION_UNREACHABLE', `The Kiwi at ${target.url} (pid ${target.pid}) did not answer: ${(err as Error).message}.`);
  }
  const body: unknown = await res.json().catch(() => null);
  if (!res.ok) {
    const e = (body as { error?: { message?: string } } | null)?.error;
    throw new KiwiError(res.status === 401 ? 'CONTROL_UNAUTHORIZED' : 'CONTROL_BAD_REQUEST', `The Kiwi at ${target.url} refused: ${e?.message ?? `HTTP ${res.status}`}`);
  }
  const parsed = SessionStatusSchema.safeParse(body);
  if (!parsed.success) throw new KiwiError('CONTROL_BAD_REQUEST', `The Kiwi at ${target.url} answered a status this version cannot read.`);
  return parsed.data;
}

function table(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) => `  ${r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')}`.trimEnd());
}

const ms = (v: number | null | undefined): string => (v === null || v === undefined ? '-' : `${v.toFixed(2)} ms`);

/** The plain-text status: a header, then members, stages and links as tables. */
export function formatStatus(s: SessionStatus, target: Pick<ControlFile, 'url' | 'pid'>): string {
  const lines: string[] = [];
  const phase = s.role === 'host' ? (s.ring_state?.phase ?? 'gathering') : s.phase;
  lines.push(`${s.role === 'host' ? 'Host' : s.role === 'member' ? 'Member' : 'Kiwi'} (pid ${target.pid}, ${target.url}): ${phase}`);
  if (s.code !== null) lines.push(`Session code: ${s.code}`);
  if (s.model !== null) lines.push(`Model: ${s.model}`);
  if (s.serving !== null) lines.push(`Serving: ${s.serving.url} (${s.serving.model})`);
  const tps = s.flow?.tokens_per_s ?? s.plan?.tokens_per_s ?? null;
  lines.push(`Tokens/s: ${tps !== null ? tps.toFixed(1) : '-'}${s.plan !== null ? (s.plan.measured ? ' (measured)' : ' (predicted)') : ''}${s.flow?.active === true ? ', tokens flowing' : ''}`);
  if (s.ring_state !== null && s.ring_state.epoch > 0) lines.push(`Ring generation: ${s.ring_state.epoch}, ${s.ring_state.recoveries.length} re-plans`);
  if (s.plan_error !== null) lines.push(`No plan: ${s.plan_error.message}`);
  if (s.error !== null) lines.push(`Error: ${s.error.message}`);
  if (s.role === 'host') lines.push(`Host NAT: ${natClassText(s.host_nat)}`);
  if (s.members.length > 0) {
    lines.push('', 'Members:');
    lines.push(...table([['PEER', 'NAME', 'STATE', 'IN RING', 'NAT'], ...s.members.map((m) => [String(m.peer), m.name, m.connected ? m.state : `${m.state}, disconnected`, m.in_ring ? 'yes' : 'no', m.nat != null ? natClassText(m.nat) : '-'])]));
  }
  if (s.plan !== null && s.plan.stages.length > 0) {
    lines.push('', `Stages (${s.plan.layers} layers, counted from 1):`);
    lines.push(...table([['PEER', 'NAME', 'LAYERS', 'STAGE', 'STATE'], ...s.plan.stages.map((st) => [String(st.peer), st.name, `${layerRangeText(st.start, st.end)}${st.head ? ' + head' : ''}`, ms(st.stage_ms), st.state ?? '-'])]));
  } else if (s.assignment !== null) {
    const a = s.assignment;
    lines.push('', `This member: ${layerRangeText(a.start, a.end)}${a.head ? ' + head' : ''}, loaded ${Math.round(a.load_fraction * 100)}%, stage ${ms(a.stage_ms)}`);
  }
  if (s.links.length > 0) {
    lines.push('', 'Links:');
    lines.push(...table([['LINK', 'STATE', 'KIND', 'RTT'], ...s.links.map((l) => [`${l.a}-${l.b}`, l.state, l.kind ?? '-', ms(l.rtt_ms)])]));
  }
  if (s.download !== null) {
    const d = s.download;
    lines.push('', `Download: ${d.file} ${d.state}, ${d.received_bytes}${d.total_bytes !== null ? ` of ${d.total_bytes}` : ''} bytes`);
  }
  return `${lines.join('\n')}\n`;
}
