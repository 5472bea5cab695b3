#!/usr/bin/env node
// Entry point of the `kiwi` command: the compiled electron/kiwi.ts (built by `npm install` via `prepare`).
import '../dist/electron/kiwi.js';
