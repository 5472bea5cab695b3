// Proves the lint rules that keep the layers apart (engine, shell, renderer, common/) actually
// fire: a lint config that silently stopped matching would let the engine grow an 'electron' import.
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const eslint = new ESLint({ cwd: process.cwd() });

async function lint(code: string, filePath: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).map((m) => `${m.ruleId}: ${m.message}`);
}

describe('layering lint', () => {
  it('refuses an electron import inside electron/engine', async () => {
    expect(await lint("import { app } from 'electron';\nexport const a = app;\n", 'electron/engine/model/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*must run headless/),
    ]);
  });

  it('refuses a renderer import inside electron/engine', async () => {
    expect(await lint("import { x } from '../../../renderer/src/x.js';\nexport const a = x;\n", 'electron/engine/model/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*never imports the renderer/),
    ]);
  });

  it('refuses a CLI import inside electron/engine but allows engine-internal imports', async () => {
    expect(await lint("import { main } from '../../cli.js';\nexport const a = main;\n", 'electron/engine/model/x.ts')).toEqual([
      expect.stringMatching(/does not import the CLI/),
    ]);
    expect(await lint("import { KiwiError } from '../../errors.js';\nexport const a = KiwiError;\n", 'electron/engine/model/gguf/x.ts')).toEqual([]);
  });

  it('refuses an import of a higher engine layer from a lower one', async () => {
    expect(await lint("import { Stage } from '../runtime/stage.js';\nexport const a = Stage;\n", 'electron/engine/device/x.ts')).toEqual([
      expect.stringMatching(/lower engine layer does not import a higher one/),
    ]);
    expect(await lint("import { x } from '../../pipeline/ring.js';\nexport const a = x;\n", 'electron/engine/session/sub/x.ts')).toEqual([
      expect.stringMatching(/lower engine layer/),
    ]);
    expect(await lint("import { Stage } from '../runtime/stage.js';\nexport const a = Stage;\n", 'electron/engine/pipeline/x.ts')).toEqual([]);
  });

  it('keeps server/ below pipeline/ and both below the hosting composition', async () => {
    expect(await lint("import { SessionHost } from '../pipeline/session-host.js';\nexport const a = SessionHost;\n", 'electron/engine/server/x.ts')).toEqual([
      expect.stringMatching(/lower engine layer does not import a higher one \(pipeline, hosting\)/),
    ]);
    expect(await lint("import { ringHosting } from '../hosting/ring-control.js';\nexport const a = ringHosting;\n", 'electron/engine/server/x.ts')).toEqual([
      expect.stringMatching(/lower engine layer/),
    ]);
    expect(await lint("import { ringHosting } from '../hosting/ring-control.js';\nexport const a = ringHosting;\n", 'electron/engine/pipeline/x.ts')).toEqual([
      expect.stringMatching(/lower engine layer/),
    ]);
    // The ring implements the backend contract, which lives below both; the composition imports both.
    expect(await lint("import type { CompletionBackend } from '../completion/completion-backend.js';\nexport type A = CompletionBackend;\n", 'electron/engine/pipeline/x.ts')).toEqual([]);
    expect(await lint("import type { CompletionBackend } from '../completion/completion-backend.js';\nexport type A = CompletionBackend;\n", 'electron/engine/server/x.ts')).toEqual([]);
    expect(await lint("import { SessionHost } from '../pipeline/session-host.js';\nimport { SessionControl } from './session-control.js';\nexport const a = [SessionHost, SessionControl];\n", 'electron/engine/hosting/x.ts')).toEqual([]);
  });

  // [the importing file's layer, the imported module, one name it exports, whether the lint allows it]
  const layerCases: ReadonlyArray<readonly [string, string, string, boolean]> = [
    // server/ and pipeline/ stay apart, with the completion contract below both.
    ['pipeline', 'server/local-backend', 'LocalBackend', false],
    ['completion', 'pipeline/ring-backend', 'RingBackend', false],
    ['completion', 'server/http-server', 'startOpenAiServer', false],
    ['completion', 'runtime/sampling', 'Sampler', true],
    ['runtime', 'completion/completion-backend', 'PromptInput', false],
    // The middle tier: session → rendezvous → transport, and planner → runtime; the branches apart.
    ['transport', 'session/member', 'MemberSession', false],
    ['transport', 'rendezvous/protocol', 'RelayChannel', false],
    ['session', 'rendezvous/protocol', 'RelayChannel', true],
    ['session', 'transport/secure-link', 'openSecureLink', true],
    ['rendezvous', 'transport/ws', 'connectWs', true],
    ['rendezvous', 'session/rendezvous-client', 'RendezvousClient', false],
    ['planner', 'runtime/memory-model', 'tensorResidentBytes', true],
    ['runtime', 'planner/plan', 'planRing', false],
    ['runtime', 'session/member', 'MemberSession', false],
    ['planner', 'transport/ws', 'connectWs', false],
    ['session', 'runtime/stage', 'Stage', false],
    // ort/ (the one owner of onnxruntime-node) sits below every layer and imports none of them.
    ['runtime', 'ort/session', 'createStageSession', true],
    ['device', 'ort/providers', 'openProbeSession', true],
    ['model', 'ort/onnx-graph', 'GraphBuilder', true],
    ['pipeline', 'ort/session', 'availableProviders', true],
    ['ort', 'runtime/stage', 'Stage', false],
    ['ort', 'device/execution-providers', 'selectProvider', false],
    ['ort', 'model/gguf/quant/half', 'f32ToF16Bits', false],
    ['ort', 'test-support/delay-proxy', 'startDelayProxy', false],
  ];

  it.each(layerCases)('orders the layers: %s importing %s (%s) allowed: %s', async (from, module, name, allowed) => {
    const messages = await lint(`import { ${name} } from '../${module}.js';\nexport const a = ${name};\n`, `electron/engine/${from}/x.ts`);
    expect(messages).toEqual(allowed ? [] : [expect.stringMatching(/no-restricted-imports: .*lower engine layer does not import a higher one/)]);
  });

  it('names the layers an import may not reach, and lets the rendezvous tests drive the server with the real client', async () => {
    expect(await lint("import { LocalBackend } from '../server/local-backend.js';\nexport const a = LocalBackend;\n", 'electron/engine/pipeline/x.ts')).toEqual([
      expect.stringMatching(/\(server, hosting\)/),
    ]);
    expect(await lint("import { RendezvousClient } from '../session/rendezvous-client.js';\nexport const a = RendezvousClient;\n", 'electron/engine/rendezvous/x.test.ts')).toEqual([]);
  });

  it('lets ort/ import the files directly under electron/engine/, and keeps those below ort/', async () => {
    expect(await lint("import { KiwiError } from '../errors.js';\nexport const a = KiwiError;\n", 'electron/engine/ort/x.ts')).toEqual([]);
    expect(await lint("import { createStageSession } from './ort/session.js';\nexport const a = createStageSession;\n", 'electron/engine/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*lower engine layer does not import a higher one \(ort, /),
    ]);
    expect(await lint("import { Stage } from './runtime/stage.js';\nexport const a = Stage;\n", 'electron/engine/x.ts')).toEqual([expect.stringMatching(/lower engine layer/)]);
    expect(await lint("import { KiwiError } from './errors.js';\nexport const a = KiwiError;\n", 'electron/engine/x.ts')).toEqual([]);
  });

  const ortOwner = /no-restricted-syntax: onnxruntime-node has one owner: use electron\/engine\/ort\//;

  it('lets only ort/ name onnxruntime-node, in any form of import', async () => {
    const forms = [
      "import * as ort from 'onnxruntime-node';\nexport const a = ort;\n",
      "import type { Tensor } from 'onnxruntime-node';\nexport type A = Tensor;\n",
      "export async function f() {\n  return import('onnxruntime-node');\n}\n",
      "import { createRequire } from 'node:module';\nexport const p = createRequire(import.meta.url).resolve('onnxruntime-node/package.json');\n",
      "export { Tensor } from 'onnxruntime-common';\n",
    ];
    for (const file of ['electron/engine/runtime/x.ts', 'electron/engine/device/x.ts', 'electron/engine/runtime/x.test.ts', 'electron/commands/x.ts', 'bench/x.ts', 'e2e/x.ts']) {
      for (const code of forms) expect(await lint(code, file), `${file}: ${code}`).toEqual([expect.stringMatching(ortOwner)]);
    }
    for (const code of forms) expect(await lint(code, 'electron/engine/ort/x.ts')).toEqual([]);
    // A message that mentions the package is no import of it.
    expect(await lint("export const hint = 'approve onnxruntime-node\\'s install script';\n", 'electron/engine/device/x.ts')).toEqual([]);
  });

  it('lets the tests and benchmarks that measure onnxruntime itself use it raw, and no others', async () => {
    const code = "import * as ort from 'onnxruntime-node';\nexport const a = ort;\n";
    for (const file of ['electron/engine/runtime/fp16-cpu-kernels.test.ts', 'electron/engine/runtime/stage-graph-fp16.test.ts', 'bench/matmulnbits.ts', 'bench/stage-profile.ts']) {
      expect(await lint(code, file)).toEqual([]);
    }
    expect(await lint(code, 'electron/engine/runtime/stage-graph.test.ts')).toEqual([expect.stringMatching(ortOwner)]);
  });

  it('refuses an electron import in main-process files other than the shell files', async () => {
    expect(await lint("import { app } from 'electron';\nexport const a = app;\n", 'electron/cli.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*Only electron\/main.ts/),
    ]);
  });

  it('allows electron in the shell files', async () => {
    expect(await lint("import { app } from 'electron';\nexport const a = app;\n", 'electron/main.ts')).toEqual([]);
  });

  it('refuses engine imports from the renderer', async () => {
    expect(await lint("import { KiwiError } from '../../electron/engine/errors.js';\nexport const a = KiwiError;\n", 'renderer/src/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*control API/),
    ]);
  });
});

describe('common/ layering lint', () => {
  it('refuses electron, engine and renderer imports in common/', async () => {
    expect(await lint("import { app } from 'electron';\nexport const a = app;\n", 'common/x.ts')).toEqual([expect.stringMatching(/no-restricted-imports: .*no electron/)]);
    expect(await lint("import { KiwiError } from '../electron/engine/errors.js';\nexport const a = KiwiError;\n", 'common/x.ts')).toEqual([
      expect.stringMatching(/no-restricted-imports: .*neither electron/),
    ]);
    expect(await lint("import { App } from '../renderer/src/app.js';\nexport const a = App;\n", 'common/x.ts')).toEqual([expect.stringMatching(/neither electron/)]);
  });

  it('lets both the engine and the renderer import common/', async () => {
    expect(await lint("import { SessionStatus } from '../../../common/control-api.js';\nexport const a = SessionStatus;\n", 'electron/engine/server/x.ts')).toEqual([]);
    expect(await lint("import { SessionStatus } from '../../common/control-api.js';\nexport const a = SessionStatus;\n", 'renderer/src/x.ts')).toEqual([]);
  });
});
