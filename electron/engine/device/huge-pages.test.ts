import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { ProcessSet, waitEvent } from '../test-support/processes.js';
import { hugePagesEnv, hugePagesFacts, hugePagesInWords, hugePagesRestart, type HugePagesFacts } from './huge-pages.js';
import { loadExecAddon } from './native-addon.js';

const linux = (over: Partial<HugePagesFacts> = {}): HugePagesFacts => ({
  platform: 'linux',
  env: { PATH: '/usr/bin', HOME: '/root' },
  thp: 'always [madvise] never\n',
  cmdline: '/usr/bin/node\0--import\0tsx\0electron/kiwi.ts\0serve\0--model\0a b.gguf\0',
  ...over,
});

describe('hugePagesRestart', () => {
  it('restarts the same command line with the tunable where transparent huge pages are madvise', () => {
    const r = hugePagesRestart(linux());
    expect(r).toEqual({
      restart: true,
      file: '/proc/self/exe',
      args: ['/usr/bin/node', '--import', 'tsx', 'electron/kiwi.ts', 'serve', '--model', 'a b.gguf'],
      env: ['PATH=/usr/bin', 'HOME=/root', 'GLIBC_TUNABLES=glibc.malloc.hugetlb=1'],
      keepFds: [0, 1, 2],
    });
  });

  it('keeps the IPC channel of a process forked by Node open', () => {
    const r = hugePagesRestart(linux({ env: { NODE_CHANNEL_FD: '3' } }));
    expect(r.restart && r.keepFds).toEqual([0, 1, 2, 3]);
  });

  it('keeps the tunables already set and adds its own after them', () => {
    const r = hugePagesRestart(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.arena_max=2' } }));
    expect(r.restart && r.env).toEqual(['GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1']);
  });

  it('does not restart where it would change nothing or was told not to', () => {
    const reason = (f: HugePagesFacts): string => {
      const r = hugePagesRestart(f);
      if (r.restart) throw new Error('restarted');
      return r.reason;
    };
    // Once restarted, the tunable is there: no second restart (and a user's own choice stands).
    expect(reason(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1' } }))).toMatch(/already set/);
    expect(reason(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' } }))).toMatch(/already set/);
    expect(reason(linux({ env: { KIWI_HUGE_PAGES: '0' } }))).toBe('KIWI_HUGE_PAGES=0');
    expect(reason(linux({ platform: 'darwin' }))).toMatch(/Linux only/);
    expect(reason(linux({ platform: 'win32' }))).toMatch(/Linux only/);
    expect(reason(linux({ thp: '[always] madvise never' }))).toMatch(/'always'/);
    expect(reason(linux({ thp: 'always madvise [never]' }))).toMatch(/'never'/);
    expect(reason(linux({ thp: undefined }))).toMatch(/not available/);
    expect(reason(linux({ cmdline: '' }))).toMatch(/unreadable/);
  });
});

describe('hugePagesInWords', () => {
  it('says whether large allocations get huge pages, and why not', () => {
    expect(hugePagesInWords(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1' } }))).toBe('yes (glibc.malloc.hugetlb=1)');
    expect(hugePagesInWords(linux({ thp: '[always] madvise never' }))).toBe("yes (transparent huge pages are 'always')");
    expect(hugePagesInWords(linux())).toMatch(/^no \(kiwi could not restart with them/);
    expect(hugePagesInWords(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' } }))).toMatch(/^no \(already set/);
    expect(hugePagesInWords(linux({ env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1', KIWI_HUGE_PAGES: '0' } }))).toBe('yes (glibc.malloc.hugetlb=1)');
    expect(hugePagesInWords(linux({ env: { KIWI_HUGE_PAGES: '0' } }))).toBe('no (KIWI_HUGE_PAGES=0)');
    expect(hugePagesInWords(linux({ thp: 'always madvise [never]', env: { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1' } }))).toBe("no (transparent huge pages are 'never')");
    expect(hugePagesInWords(linux({ platform: 'darwin' }))).toMatch(/Linux only/);
  });
});

describe('hugePagesEnv', () => {
  it('gives a forked engine worker the tunable where kiwi would restart with it', () => {
    const applies = hugePagesRestart({ ...hugePagesFacts({}), cmdline: 'node' }).restart;
    expect(hugePagesEnv({ PATH: '/usr/bin' })).toEqual(applies ? { PATH: '/usr/bin', GLIBC_TUNABLES: 'glibc.malloc.hugetlb=1' } : { PATH: '/usr/bin' });
    expect(hugePagesEnv({ KIWI_HUGE_PAGES: '0' })).toEqual({ KIWI_HUGE_PAGES: '0' });
  });
});

describe('kiwi restarts itself with huge pages', () => {
  const procs = new ProcessSet();
  afterEach(() => procs.killAll());

  // The expectation follows this machine: with transparent huge pages in madvise mode and the
  // native addon built, a `kiwi` that opens stages has the tunable; elsewhere it runs as it was started.
  it.skipIf(process.platform !== 'linux')('keeps its pid and gains the tunable where that applies, for the commands that open stages only', async () => {
    const env = { ...process.env };
    delete env.GLIBC_TUNABLES;
    delete env.KIWI_HUGE_PAGES;
    const expected = hugePagesRestart(hugePagesFacts(env)).restart && loadExecAddon().ok;
    const tunable = (pid: number | undefined): boolean => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes('GLIBC_TUNABLES=glibc.malloc.hugetlb=1');
    const serve = procs.kiwi('serve', '--model', await testModelPath('stories260K.gguf'), '--port', '0', '--threads', '1', '--no-shard-cache', '--json');
    await waitEvent(serve, (e) => e.event === 'serving', 'kiwi serve', 30_000);
    expect(tunable(serve.child.pid)).toBe(expected);
    // The process answers on the pid it was started with (execve keeps it); it still stops on a signal.
    serve.child.kill('SIGTERM');
    expect(await serve.exited).toBe(0);
    // A command that opens no stage (the rendezvous) starts as it is, with no restart.
    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous');
    expect(tunable(rv.child.pid)).toBe(false);
    rv.child.kill('SIGTERM');
    expect(await rv.exited).toBe(0);
  }, 60_000);
});
