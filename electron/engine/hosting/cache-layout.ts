// Where the nodes keep what they reuse across runs, under Kiwi's cache folder (paths.ts,
// $KIWI_CACHE_DIR): built stage graphs (shards/), layers received from a host (weights/) and a
// member's identity keys (identity/). Downloaded models: model-fetch.ts (models/).
import { join } from 'node:path';
import { kiwiCacheDir } from '../paths.js';
import { ShardCache } from '../runtime/shard-cache.js';

export function shardCache(): ShardCache {
  return new ShardCache(join(kiwiCacheDir(), 'shards'));
}

export function weightsDir(): string {
  return join(kiwiCacheDir(), 'weights');
}

export function identityDir(): string {
  return join(kiwiCacheDir(), 'identity');
}
