// What a member does when a reconnect attempt failed, by the error's code: the session ended, the
// resume secret is no longer known (the code is the way back in), the failure is final, or retry.
import type { KiwiErrorCode } from '../errors.js';

export type ReconnectVerdict = 'session-ended' | 'forget-resume' | 'fatal' | 'retry';

/** Codes a resume the host no longer knows (it forgot the member) ends with. */
const RESUME_REFUSED: readonly KiwiErrorCode[] = ['PAKE_CONFIRMATION_FAILED', 'PAKE_UNEXPECTED', 'SESSION_REJECTED'];
/** A wrong code or a closed session will not get better by retrying. */
const FINAL: readonly KiwiErrorCode[] = ['PAKE_CONFIRMATION_FAILED', 'SESSION_REJECTED', 'NAMEPLATE_CLOSED', 'NAMEPLATE_UNKNOWN'];

export function reconnectVerdict(code: KiwiErrorCode, rejoinedWithResume: boolean): ReconnectVerdict {
  // The nameplate is gone after we were in the session: the host ended it.
  if (code === 'NAMEPLATE_UNKNOWN') return 'session-ended';
  if (rejoinedWithResume && RESUME_REFUSED.includes(code)) return 'forget-resume';
  if (FINAL.includes(code)) return 'fatal';
  return 'retry';
}
