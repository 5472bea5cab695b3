import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// Relative base so the built page loads from file:// inside Electron as well as over HTTP.
export default defineConfig({
  root: import.meta.dirname,
  base: './',
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true },
});
