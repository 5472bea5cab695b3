import { describe, expect, test } from 'vitest';
import { OpeningGate } from './opening-gate.js';

/** Whether `p` has settled once pending callbacks ran. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('OpeningGate', () => {
  test('a step for the stage being opened waits until its load ends', async () => {
    const gate = new OpeningGate<string>();
    gate.begin('epoch 2');
    const step = gate.wait('epoch 2');
    expect(await settled(step)).toBe(false);
    gate.end('epoch 2');
    expect(await settled(step)).toBe(true);
  });

  test('nothing waits for a stage that is not opening, or for another assignment', async () => {
    const gate = new OpeningGate<string>();
    expect(await settled(gate.wait('epoch 1'))).toBe(true);
    expect(await settled(gate.wait(undefined))).toBe(true);
    gate.begin('epoch 2');
    expect(await settled(gate.wait('epoch 1'))).toBe(true);
    gate.end('epoch 2');
    expect(await settled(gate.wait('epoch 2'))).toBe(true);
  });

  test('a newer assignment ends the wait for the one it replaced; an old load ending leaves the new one opening', async () => {
    const gate = new OpeningGate<string>();
    gate.begin('epoch 2');
    const old = gate.wait('epoch 2');
    gate.begin('epoch 3');
    expect(await settled(old)).toBe(true);
    const next = gate.wait('epoch 3');
    gate.end('epoch 2');
    expect(await settled(next)).toBe(false);
    gate.end('epoch 3');
    expect(await settled(next)).toBe(true);
  });
});
