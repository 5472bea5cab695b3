// Lint keeps the layers honest (ARCHITECTURE.md): the engine is plain Node, only the shell files
// import 'electron', and the renderer talks to the engine only over the control API.
import tseslint from 'typescript-eslint';

const electronShellFiles = ['electron/main.ts', 'electron/preload.ts', 'electron/tray.ts', 'electron/window.ts'];

/**
 * The import rule for engine code that must not reach the layers named in `above`; `up` is how
 * its imports name a layer's folder (`../` and up from inside a layer, `./` from the engine's root files).
 */
function engineImportRule(above, up = '(\\.\\./)+') {
  return {
    paths: [{ name: 'electron', message: 'electron/engine must run headless: only electron/{main,preload,tray,window}.ts import electron.' }],
    patterns: [
      { group: ['**/renderer/**', 'react', 'react-dom', '@tanstack/*'], message: 'The engine never imports the renderer or UI libraries.' },
      { regex: '^(\\.\\./)+(commands/|(cli|kiwi|main|preload|tray|window|ipc-channels)\\.js$)', message: 'The engine does not import the CLI or the Electron shell.' },
      ...(above.length > 0
        ? [{ regex: `^${up}(${above.join('|')})/`, message: `A lower engine layer does not import a higher one (${above.join(', ')}); see ARCHITECTURE.md.` }]
        : []),
    ],
  };
}

function engineLayers(layers) {
  return layers.map(({ dirs, mayNotImport }) => ({
    files: dirs.map((d) => `electron/engine/${d}/**/*.ts`),
    rules: { 'no-restricted-imports': ['error', engineImportRule(mayNotImport)] },
  }));
}

export default tseslint.config(
  { ignores: ['dist/**', 'out/**', 'node_modules/**', 'renderer/dist/**', 'native/build/**', 'bench/results/**', 'e2e/artifacts/**'] },
  {
    files: ['**/*.ts', '**/*.tsx'],
    languageOptions: { parser: tseslint.parser },
    plugins: { '@typescript-eslint': tseslint.plugin },
    rules: {
      'no-debugger': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['electron/**/*.ts'],
    ignores: electronShellFiles,
    rules: {
      'no-restricted-imports': ['error', {
        paths: [{ name: 'electron', message: `Only ${electronShellFiles.join(', ')} import electron.` }],
        patterns: [{ group: ['**/renderer/**', 'react', 'react-dom'], message: 'The main process never imports the renderer.' }],
      }],
    },
  },
  // The engine's own layers (ARCHITECTURE.md, "Dependency direction"), top to bottom:
  //   hosting (composition) → server (HTTP), pipeline (the ring); neither imports the other
  //   → completion (the CompletionBackend contract both sides share)
  //   → the middle tier, itself ordered as its imports run today:
  //       session → rendezvous → transport   (a host embeds the rendezvous; all of it rides on links)
  //       planner → runtime                  (the planner sizes stages with the runtime's memory model)
  //   → model, device
  //   → ort (the one owner of onnxruntime-node: session factory, providers and their probes, ONNX graph builder)
  //   → the files directly under electron/engine/ (errors.ts, paths.ts).
  // A layer never imports one above it, nor one of the other middle-tier branch.
  ...engineLayers([
    { dirs: ['ort'], mayNotImport: ['model', 'device', 'runtime', 'planner', 'session', 'transport', 'rendezvous', 'completion', 'pipeline', 'server', 'hosting', 'test-support'] },
    { dirs: ['model', 'device'], mayNotImport: ['runtime', 'planner', 'session', 'transport', 'rendezvous', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['transport'], mayNotImport: ['rendezvous', 'session', 'runtime', 'planner', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['rendezvous'], mayNotImport: ['session', 'runtime', 'planner', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['session'], mayNotImport: ['runtime', 'planner', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['runtime'], mayNotImport: ['planner', 'session', 'rendezvous', 'transport', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['planner'], mayNotImport: ['session', 'rendezvous', 'transport', 'completion', 'pipeline', 'server', 'hosting'] },
    { dirs: ['completion'], mayNotImport: ['pipeline', 'server', 'hosting'] },
    { dirs: ['server'], mayNotImport: ['pipeline', 'hosting'] },
    { dirs: ['pipeline'], mayNotImport: ['server', 'hosting'] },
    { dirs: ['hosting', 'test-support'], mayNotImport: [] },
  ]),
  {
    // The rendezvous server's own tests drive it with the real client (session/rendezvous-client.ts),
    // the one place below session/ that may import it; its production code may not (rule above).
    files: ['electron/engine/rendezvous/**/*.test.ts'],
    rules: { 'no-restricted-imports': ['error', engineImportRule(['runtime', 'planner', 'completion', 'pipeline', 'server', 'hosting'])] },
  },
  {
    // The guard test drives the control API with the real SessionControl (hosting/session-control.ts),
    // as the rendezvous tests use the real client; server/'s production code may not import hosting/.
    files: ['electron/engine/server/http-guard.server.test.ts'],
    rules: { 'no-restricted-imports': ['error', engineImportRule(['pipeline'])] },
  },
  {
    // Files directly under electron/engine/ (errors.ts, paths.ts) are the bottom of the engine.
    files: ['electron/engine/*.ts'],
    rules: { 'no-restricted-imports': ['error', engineImportRule(['ort', 'model', 'device', 'runtime', 'planner', 'session', 'transport', 'rendezvous', 'completion', 'pipeline', 'server', 'hosting', 'test-support'], '\\./')] },
  },
  {
    // onnxruntime-node has one owner, electron/engine/ort/: everything else reaches it through
    // ort/session.ts (sessions, tensors), ort/providers.ts (providers, probe sessions) and
    // ort/onnx-graph.ts. A module name in any form counts: import, import(), require, require.resolve.
    // The exceptions measure onnxruntime itself, below the session factory: which CPU kernels it
    // has in fp16, stage graphs run with fp16 caches, its MatMulNBits and KV binding microbenchmarks,
    // and its profiler over session-option variants.
    files: ['**/*.ts', '**/*.tsx'],
    ignores: [
      'electron/engine/ort/**',
      'electron/engine/runtime/fp16-cpu-kernels.test.ts',
      'electron/engine/runtime/stage-graph-fp16.test.ts',
      'bench/matmulnbits.ts',
      'bench/matmulnbits-kquant.ts',
      'bench/gqa-kv-binding.ts',
      'bench/stage-profile.ts',
    ],
    rules: {
      'no-restricted-syntax': ['error', {
        selector: 'Literal[value=/^onnxruntime-(node|common)/]',
        message: 'onnxruntime-node has one owner: use electron/engine/ort/ (session.ts, providers.ts, onnx-graph.ts).',
      }],
    },
  },
  {
    // common/ is shared by the engine and the renderer (VS Code's common layer): it imports neither.
    files: ['common/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: [{ name: 'electron', message: 'common/ runs in the renderer and the engine alike: no electron.' }],
        patterns: [{ group: ['**/electron/**', '**/renderer/**'], message: 'common/ imports neither electron/** nor renderer/**; move shared code into common/.' }],
      }],
    },
  },
  {
    files: ['renderer/**/*.ts', 'renderer/**/*.tsx'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: [{ name: 'electron', message: 'The renderer reaches the main process only through the preload bridge.' }],
        patterns: [{ group: ['**/electron/**'], message: 'The renderer talks to the engine only over the control API (HTTP/SSE), not by import.' }],
      }],
    },
  },
);
