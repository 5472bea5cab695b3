// Lint keeps the layers honest (ARCHITECTURE.md): the engine is plain Node, only the shell files
// import 'electron', and the renderer talks to the engine only over the control API.
import tseslint from 'typescript-eslint';

const electronShellFiles = ['electron/main.ts', 'electron/preload.ts', 'electron/tray.ts', 'electron/window.ts'];

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
  {
    files: ['electron/engine/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: [{ name: 'electron', message: 'electron/engine must run headless: only electron/{main,preload,tray,window}.ts import electron.' }],
        patterns: [
          { group: ['**/renderer/**', 'react', 'react-dom', '@tanstack/*'], message: 'The engine never imports the renderer or UI libraries.' },
          { regex: '^(\\.\\./)+(commands/|(cli|main|preload|tray|window|ipc-channels)\\.js$)', message: 'The engine does not import the CLI or the Electron shell.' },
        ],
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
