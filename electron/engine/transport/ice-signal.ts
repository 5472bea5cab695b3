// What the two ends of an ICE link exchange through the session (ice-link.ts makes and takes
// them; session-messages.ts validates them with these limits). Kept apart from ice-link.ts so
// that validating a message does not load the native WebRTC library.
export type IceSignal =
  | { kind: 'offer' | 'answer'; sdp: string }
  | { kind: 'candidate'; candidate: string; mid: string }
  /** The responder does not take ICE links (--no-ice): fall back at once. */
  | { kind: 'unavailable' };

export const MAX_SDP_CHARS = 16 * 1024;
export const MAX_CANDIDATE_CHARS = 512;
export const MAX_MID_CHARS = 64;
