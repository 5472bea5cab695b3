// Builds the native probes (native/binding.gyp) with the node-gyp that ships with npm. Offline
// machines work when Node's own headers are installed (<prefix>/include/node): they are passed as
// --nodedir instead of letting node-gyp download them. A failed build is reported but does not
// fail the install, because `kiwi bench` then falls back to JS and says so; --strict makes it fatal.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const nativeDir = dirname(fileURLToPath(import.meta.url));
const strict = process.argv.includes('--strict');

function findNodeGyp() {
  const prefix = dirname(dirname(process.execPath));
  const candidates = [
    process.env.npm_config_node_gyp, // set by npm while it runs a package script
    join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'), // Unix installs
    join(dirname(process.execPath), 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'), // Windows
  ];
  return candidates.find((p) => p !== undefined && p !== '' && existsSync(p));
}

const gyp = findNodeGyp();
if (gyp === undefined) {
  console.warn('kiwi: node-gyp (shipped with npm) was not found; the native bandwidth probe is not built and kiwi bench will use its JS fallback.');
  process.exit(strict ? 1 : 0);
}
const args = [gyp, 'rebuild', '--directory', nativeDir];
const prefix = dirname(dirname(process.execPath));
if (existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
const result = spawnSync(process.execPath, args, { stdio: 'inherit' });
if (result.status !== 0) {
  console.warn(`kiwi: building native/ failed (${result.error?.message ?? `exit ${result.status}`}); kiwi bench will use its JS fallback. It needs python3, make and a C compiler.`);
  process.exit(strict ? 1 : 0);
}
