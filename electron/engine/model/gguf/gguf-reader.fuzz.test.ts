// Fuzzing the GGUF parser: random bytes, and truncations and mutations of real files. The only
// thing that may ever escape is a KiwiError (GGUF_INVALID or GGUF_UNSUPPORTED).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KiwiError } from '../../errors.js';
import { testModelPath } from '../test-models.js';
import { openGguf, parseGguf } from './gguf-reader.js';
import { summarizeModel } from '../model-summary.js';

const ALLOWED = new Set(['GGUF_INVALID', 'GGUF_UNSUPPORTED']);
// Small limits keep every fuzz case cheap while exercising the same checks as the defaults.
const LIMITS = { maxHeaderBytes: 4 * 1024 * 1024 };

/** Parses and returns 'ok' or the error code; anything but a KiwiError fails the property. */
function outcome(bytes: Uint8Array, fileSize?: number): string {
  try {
    parseGguf(bytes, fileSize ?? bytes.length, LIMITS);
    return 'ok';
  } catch (err) {
    if (!(err instanceof KiwiError) || !ALLOWED.has(err.code)) throw err;
    return err.code;
  }
}

let stories: Uint8Array;
let vocab: Uint8Array;
let dir: string;
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-gguf-fuzz-'));
  stories = new Uint8Array(await readFile(await testModelPath('stories260K.gguf')));
  vocab = new Uint8Array(await readFile(await testModelPath('vocab/ggml-vocab-llama-spm.gguf')));
});

const GGUF_PREFIX = Uint8Array.of(0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0);

describe('parseGguf under fuzzing', () => {
  it('only ever throws a KiwiError on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (b) => {
        outcome(b);
      }),
      { numRuns: 2000 },
    );
  });

  it('only ever throws a KiwiError on random bytes after a valid magic and version', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), fc.boolean(), (b, v2) => {
        const bytes = new Uint8Array(GGUF_PREFIX.length + b.length);
        bytes.set(GGUF_PREFIX);
        if (v2) bytes[4] = 2;
        bytes.set(b, GGUF_PREFIX.length);
        outcome(bytes);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses every truncation of stories260K.gguf with a KiwiError', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: stories.length - 1 }), (len) => {
        expect(outcome(stories.subarray(0, len))).toBe('GGUF_INVALID');
      }),
      { numRuns: 300 },
    );
  });

  it('survives random byte mutations of the stories260K.gguf header', () => {
    // Mutations land in the header (the first 14176 bytes); the header is parsed from a copy
    // sized like the real file so tensor extents are checked too.
    const headerLen = 14176;
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: headerLen - 1 }), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }),
        (edits) => {
          const copy = stories.slice(0, headerLen);
          for (const [at, value] of edits) copy[at] = value;
          outcome(copy, stories.length);
        },
      ),
      { numRuns: 1500 },
    );
  });

  it('survives mutated length and count fields (big values) in a vocab file', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 8, max: vocab.length - 8 }),
        fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
        (at, value) => {
          const copy = vocab.slice();
          new DataView(copy.buffer).setBigUint64(at, value, true);
          outcome(copy);
        },
      ),
      { numRuns: 120 },
    );
  });

  it('survives random truncation plus mutation of a vocab file', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: vocab.length }),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        (len, edits) => {
          const copy = vocab.slice(0, len);
          for (const [at, value] of edits) if (copy.length > 0) copy[at % copy.length] = value;
          outcome(copy);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('openGguf, reading incrementally from disk, also only throws KiwiErrors on mutated files', async () => {
    const path = join(dir, 'mutated.gguf');
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: stories.length }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 14175 }), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
        async (len, edits) => {
          const copy = stories.slice(0, len);
          for (const [at, value] of edits) if (at < copy.length) copy[at] = value;
          await writeFile(path, copy);
          try {
            await openGguf(path, LIMITS);
          } catch (err) {
            if (!(err instanceof KiwiError) || !ALLOWED.has(err.code)) throw err;
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it('model config and summary of a mutated stories260K header only ever throw KiwiErrors', () => {
    // Mutations aimed at the metadata values (after the tokenizer arrays) that config reads.
    const headerLen = 14176;
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 11000, max: headerLen - 1 }), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 }),
        (edits) => {
          const copy = stories.slice(0, headerLen);
          for (const [at, value] of edits) copy[at] = value;
          try {
            summarizeModel(parseGguf(copy, stories.length, LIMITS));
          } catch (err) {
            if (!(err instanceof KiwiError)) throw err;
          }
        },
      ),
      { numRuns: 1500 },
    );
  });
});
