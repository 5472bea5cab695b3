// A device summary file (`kiwi bench --json > FILE`) that `kiwi join` shows the host and `kiwi host`
// plans itself with: read with a size limit and checked to be one JSON object.
import { readFile, stat } from 'node:fs/promises';
import { KiwiError } from '../engine/errors.js';

const MAX_CAPABILITIES_BYTES = 32 * 1024;

export async function readCapabilities(path: string): Promise<Record<string, unknown>> {
  let size: number;
  try {
    size = (await stat(path)).size;
  } catch {
    throw new KiwiError('FILE_NOT_FOUND', `Cannot read ${path}. Create it with 'kiwi bench --json > ${path}'.`);
  }
  if (size > MAX_CAPABILITIES_BYTES) throw new KiwiError('USAGE', `${path} is ${size} bytes; a device summary is at most ${MAX_CAPABILITIES_BYTES}.`);
  let value: unknown;
  try {
    value = JSON.parse(await readFile(path, 'utf8'));
  } catch {
    throw new KiwiError('USAGE', `${path} is not JSON; use the output of 'kiwi bench --json'.`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new KiwiError('USAGE', `${path} must hold one JSON object.`);
  return value as Record<string, unknown>;
}
