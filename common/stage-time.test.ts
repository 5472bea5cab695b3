import { describe, expect, it } from 'vitest';
import { stageTimeText } from './stage-time.js';

describe('stageTimeText', () => {
  it('shows the measured time beside the plan\'s, or whichever is known', () => {
    expect(stageTimeText({ stage_ms: 4.446, predicted_ms: 0.3, measured_ms: 4.446 })).toBe('4.45 ms (plan 0.30 ms)');
    expect(stageTimeText({ stage_ms: 12, predicted_ms: null, measured_ms: 12 })).toBe('12 ms');
    expect(stageTimeText({ stage_ms: 2.5, predicted_ms: 2.5, measured_ms: null })).toBe('2.50 ms planned');
    // A status from before predicted/measured were reported: its one figure.
    expect(stageTimeText({ stage_ms: 1500 })).toBe('1.5 s');
    expect(stageTimeText({ stage_ms: null, predicted_ms: null, measured_ms: null })).toBeNull();
  });
});
