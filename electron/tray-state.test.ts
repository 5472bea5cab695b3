import { describe, expect, it } from 'vitest';
import type { SessionStatus } from '../common/control-api.js';
import { drawBadge, trayState } from './tray-state.js';

const idle: SessionStatus = {
  role: 'none', phase: 'idle', paused: false, code: null, rendezvous: null, self_peer: null, model: null,
  members: [], ring: [], links: [], plan: null, plan_error: null, assignment: null, serving: null, error: null, ring_state: null, flow: null, download: null,
};

describe('tray state', () => {
  it('is idle outside a session, serving for a host with an API, in a session for a member', () => {
    expect(trayState(idle)).toBe('idle');
    expect(trayState({ ...idle, role: 'host', phase: 'active', serving: { url: 'http://127.0.0.1:8080/v1', model: 'm' } })).toBe('serving');
    expect(trayState({ ...idle, role: 'host', phase: 'active' })).toBe('session');
    expect(trayState({ ...idle, role: 'member', phase: 'paused', paused: true })).toBe('session');
  });

  it('is an error when a session ended badly or an action failed', () => {
    expect(trayState({ ...idle, role: 'member', phase: 'ended' })).toBe('error');
    expect(trayState({ ...idle, error: { code: 'SESSION_ENDED', message: 'The host ended the session.' } })).toBe('error');
  });

  it('draws the badge in the lower right corner and leaves the rest of the icon alone', () => {
    const w = 16;
    const icon = new Uint8Array(w * w * 4).fill(7);
    const badged = drawBadge(icon, w, w, 'error');
    const px = (x: number, y: number): number[] => [...badged.slice((y * w + x) * 4, (y * w + x) * 4 + 4)];
    expect(px(0, 0)).toEqual([7, 7, 7, 7]);
    expect(px(12, 12)).toEqual([0x2d, 0x37, 0xc8, 255]);
    expect(drawBadge(icon, w, w, 'idle')).toEqual(icon);
    expect(icon[(12 * w + 12) * 4]).toBe(7);
    expect(() => drawBadge(icon, 15, 16, 'idle')).toThrow(/not 15x16/);
  });
});
