// RingStages turns a member's weights request into the host's transfer; a failure of the host's
// own disk there ends that transfer with an error event, never the host process.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { KiwiError } from '../errors.js';
import type { StageStatus } from './ring-assignment.js';
import { RingStages } from './ring-stages.js';
import { WeightsSender } from './weights-sender.js';

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('a member\'s weights request', () => {
  it('becomes a WEIGHTS_TRANSFER_FAILED error event when the host cannot read its model file', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kiwi-ring-stages-'));
    const model = join(dir, 'model.gguf');
    await writeFile(model, Buffer.alloc(64));
    const sender = new WeightsSender(model, () => true, () => false);
    const errors: KiwiError[] = [];
    const stages = new RingStages(sender, {
      emit: (event, ...args) => {
        if (event === 'error') errors.push(args[0] as KiwiError);
      },
      loadFailed: () => undefined,
    });
    const stage: StageStatus = { peer: 1, name: 'ada', start: 0, end: 1, head: false, state: 'loading' };
    stages.assign({ stages: new Map([[1, stage]]), memberPeers: new Map([['m-ada', 1]]) });
    const span = { offset: 0, bytes: 64, sha256: '0'.repeat(64) };
    sender.plan('m-ada', [span]);
    await rm(model); // the file is gone when the member asks
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown): void => void unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      expect(stages.report('m-ada', { kind: 'weights-request', spans: [{ offset: 0, bytes: 64 }] }, 1)).toBe(true);
      await expect.poll(() => errors.length).toBe(1);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect(errors[0]).toMatchObject({ code: 'WEIGHTS_TRANSFER_FAILED', message: expect.stringMatching(/Reading the model file for ada failed: ENOENT.*still there and readable/) });
    expect(unhandled).toEqual([]);
  });
});
