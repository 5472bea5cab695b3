import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { eventPrinter } from './session-io.js';

function sink(): { out: Writable; text: () => string } {
  const chunks: string[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  return { out, text: () => chunks.join('') };
}

/** What a terminal shows after `text`: cursor-up and clear-to-end applied to the lines written so far. */
function screen(text: string): string[] {
  const lines: string[] = [''];
  let row = 0;
  for (const token of text.split(/(\x1b\[\d*[A-Za-z]|\r|\n)/)) {
    if (token === '') continue;
    const up = /^\x1b\[(\d*)A$/.exec(token);
    if (up !== null) row = Math.max(0, row - Number(up[1] || 1));
    else if (token === '\x1b[0J') lines.splice(row, lines.length - row, '');
    else if (token === '\r') continue;
    else if (token === '\n') {
      row++;
      if (lines[row] === undefined) lines[row] = '';
    } else lines[row] = (lines[row] ?? '') + token;
  }
  return lines.filter((l, i) => l !== '' || i < lines.length - 1);
}

describe('eventPrinter progress', () => {
  it('keeps one updating line per member on a terminal, with other lines above them and finished ones kept', () => {
    const { out, text } = sink();
    const print = eventPrinter(out, false, { tty: true });
    print('session', {}, 'Session code: 1-a-b-c');
    print.progress('weights-progress', 'ada', {}, 'ada: 10%', false);
    print.progress('weights-progress', 'bob', {}, 'bob: 5%', false);
    print.progress('weights-progress', 'ada', {}, 'ada: 60%', false);
    print('link', {}, 'link 0-1 direct');
    print.progress('weights-progress', 'bob', {}, 'bob: 50%', false);
    expect(screen(text())).toEqual(['Session code: 1-a-b-c', 'link 0-1 direct', 'ada: 60%', 'bob: 50%']);
    print.progress('weights-progress', 'ada', {}, 'ada: done', true);
    expect(screen(text())).toEqual(['Session code: 1-a-b-c', 'link 0-1 direct', 'ada: done', 'bob: 50%']);
  });

  it('prints a line per member every few seconds without a terminal, and always the final one', () => {
    const { out, text } = sink();
    let t = 0;
    const print = eventPrinter(out, false, { tty: false, everyMs: 5000, now: () => t });
    // Four updates a second for 12 s for each of two members, then both finish.
    for (t = 0; t < 12_000; t += 250) {
      print.progress('weights-progress', 'ada', {}, `ada ${t}`, false);
      print.progress('weights-progress', 'bob', {}, `bob ${t}`, false);
    }
    print.progress('weights-progress', 'ada', {}, 'ada done', true);
    print.progress('weights-progress', 'bob', {}, 'bob done', true);
    const lines = text().trim().split('\n');
    expect(lines).toEqual(['ada 0', 'bob 0', 'ada 5000', 'bob 5000', 'ada 10000', 'bob 10000', 'ada done', 'bob done']);
    expect(text()).not.toContain('\x1b');
  });

  it('prints every progress event as a JSON line with --json', () => {
    const { out, text } = sink();
    const print = eventPrinter(out, true, { tty: true });
    print.progress('weights-progress', 'ada', { received_bytes: 1 }, 'x', false);
    print.progress('weights-progress', 'ada', { received_bytes: 2 }, 'x', true);
    expect(text().trim().split('\n').map((l) => JSON.parse(l) as unknown)).toEqual([
      { event: 'weights-progress', received_bytes: 1 }, { event: 'weights-progress', received_bytes: 2 },
    ]);
  });
});
