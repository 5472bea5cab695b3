import { describe, expect, it } from 'vitest';
import { providerLibraryInstalled } from '../ort/providers.js';
import { parseProviderChoice, probeExecutionProviders, selectProvider } from './execution-providers.js';

describe('execution provider probe', () => {
  it('finds that the CPU provider runs a session here', async () => {
    const providers = await probeExecutionProviders();
    expect(providers.find((p) => p.name === 'cpu')).toEqual({ name: 'cpu', bundled: true, works: true, error: null });
  });

  it('gives a reason for every listed provider that does not work', async () => {
    for (const p of await probeExecutionProviders()) {
      if (p.works) expect(p.error).toBeNull();
      else expect(p.error?.length).toBeGreaterThan(0);
    }
  });
});

describe('provider selection (--provider auto|cuda|dml|cpu)', () => {
  it('parses the choices, auto by default, and refuses others as USAGE', () => {
    expect(parseProviderChoice(undefined)).toBe('auto');
    for (const c of ['auto', 'cuda', 'dml', 'cpu']) expect(parseProviderChoice(c)).toBe(c);
    expect(() => parseProviderChoice('gpu')).toThrow(expect.objectContaining({ code: 'USAGE', message: expect.stringMatching(/auto, cuda, dml, cpu/) }));
  });

  it('takes cpu without probing when asked for it', async () => {
    expect(await selectProvider('cpu')).toEqual({ provider: 'cpu', fallbacks: [] });
  });

  // This machine (Linux, npm install without onnxruntime-node's script) has no CUDA provider library.
  it.runIf(process.platform === 'linux' && !providerLibraryInstalled('cuda'))('auto falls back to cpu here and says why', async () => {
    const s = await selectProvider('auto');
    expect(s.provider).toBe('cpu');
    expect(s.fallbacks).toEqual(['cuda: provider library not installed (libonnxruntime_providers_cuda.so missing); using cpu']);
  });

  it.runIf(process.platform === 'linux' && !providerLibraryInstalled('cuda'))('an explicit cuda without its library fails with how to install it', async () => {
    const err = await selectProvider('cuda').catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'KiwiError', code: 'PROVIDER_UNAVAILABLE', details: { provider: 'cuda' } });
    expect((err as Error).message).toContain('libonnxruntime_providers_cuda.so missing');
    expect((err as Error).message).toContain('ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules/onnxruntime-node/script/install.js');
    expect((err as Error).message).toContain('The CUDA provider');
  });

  it.runIf(process.platform !== 'win32')('an explicit dml off Windows fails with PROVIDER_UNAVAILABLE', async () => {
    await expect(selectProvider('dml')).rejects.toMatchObject({ code: 'PROVIDER_UNAVAILABLE', message: expect.stringMatching(/DirectML runs on Windows only/) });
  });
});
