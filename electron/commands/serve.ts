// `kiwi serve`: runs a whole model in this process (optionally as a chain of --split stages) behind
// the OpenAI-compatible API until SIGINT/SIGTERM. The model: --model FILE, --model URL (downloaded
// into the cache first, model-arg.ts), or the embedded stories260K; the server is composed in
// engine/hosting/local-server.ts. JSON events: model, downloading / download-progress (for a URL),
// loading, serving {url}, stopped.
import { KiwiError } from '../engine/errors.js';
import { parseSplit } from '../engine/runtime/layer-range.js';
import type { ExecutionProvider } from '../engine/ort/session.js';
import { createLocalServer } from '../engine/hosting/local-server.js';
import { resolveChatTemplate } from '../engine/server/chat-template-names.js';
import { formatRequestLog, type RequestLogEntry } from '../engine/server/openai-api.js';
import { API_BROWSER_OPTIONS, apiBrowserPolicy, warnIfUnprotected } from './api-flags.js';
import { booleanOption, defineCommand, stringOption } from './command.js';
import { resolveModelArg } from './model-arg.js';
import { intOption } from './rendezvous.js';
import { eventPrinter, untilStopped } from './session-io.js';
import { parseSpeculative, withVerify } from '../engine/runtime/speculative.js';
import { WEIGHT_LAYOUT_OPTION, weightLayoutFlag } from './weight-layout-flag.js';

const PROVIDERS: readonly ExecutionProvider[] = ['cpu', 'cuda', 'dml'];

export const serveCommand = defineCommand({
  name: 'serve',
  summary: 'Serve a GGUF model on this machine as an OpenAI-compatible API',
  description:
    'Serves POST /v1/chat/completions, /v1/completions, /v1/responses (streaming and not), /v1/embeddings, GET /v1/models, ' +
    "and llama-server's POST /tokenize, /detokenize and /apply-template until Ctrl-C. " +
    'Listens on 127.0.0.1 unless --lan or --host says otherwise; with --lan, set an API key. ' +
    'The API key can also come from the KIWI_API_KEY environment variable (it then stays out of the process list).',
  positionals: [],
  options: {
    model: { type: 'string', valueName: 'FILE|URL', description: 'The GGUF model: a file, or an http(s) URL (e.g. a Hugging Face …/resolve/main/x.gguf link) downloaded into the cache once, resumably; default: the embedded stories260K story model' },
    'model-sha256': { type: 'string', valueName: 'HEX', description: 'With --model URL: the file\'s expected sha256, checked before it is used' },
    port: { type: 'string', valueName: 'P', description: 'Port of the API (0: any free port)', default: '8080' },
    host: { type: 'string', valueName: 'ADDR', description: 'Address to listen on (default 127.0.0.1)' },
    lan: { type: 'boolean', description: 'Listen on all interfaces so other machines on the network can connect' },
    'api-key': { type: 'string', valueName: 'KEY', description: 'Require Authorization: Bearer KEY on every /v1 request' },
    ...API_BROWSER_OPTIONS,
    split: { type: 'string', valueName: 'RANGES', description: 'Run the model as stages with these layer ranges, e.g. 0-2,2-5' },
    parallel: { type: 'string', valueName: 'N', description: 'Requests generated at once (batched decoding)', default: '8' },
    'max-queue': { type: 'string', valueName: 'N', description: 'Requests that may wait for a free slot; more get HTTP 429', default: '64' },
    'kv-cache-mb': { type: 'string', valueName: 'MB', description: 'KV-cache budget shared by running requests (at least one full context)', default: '1024' },
    speculative: { type: 'string', valueName: 'off|auto|K', description: 'Speculative decoding (default off, auto with --draft-model): off, auto (prompt-lookup or draft-model drafts, k adapted to acceptance and step cost, none when they do not pay) or a fixed draft length 1-8' },
    'draft-model': { type: 'string', valueName: 'FILE', description: 'A small GGUF model of the same vocabulary (e.g. Llama-3.2-1B for Llama-3.1-8B) that drafts for speculative decoding instead of prompt lookup; output stays the model\'s own, the draft model only guesses' },
    'speculative-verify': { type: 'string', valueName: 'exact|chunk', description: 'How drafts are checked: exact (each position as the decode step that would have made it, bit for bit; one pass where the kernels allow, else one step per position, still one trip round the ring) or chunk (as one prefill chunk: faster on one machine, but a near-tie can flip a token)', default: 'exact' },
    'prompt-cache-mb': { type: 'string', valueName: 'MB', description: 'KV of recent prompts kept for prompts that start the same way (inside the KV-cache budget, given back when requests need it; 0: off)', default: '256' },
    provider: { type: 'string', valueName: 'EP', description: 'Execution provider: cpu, cuda or dml (default: best available)' },
    threads: { type: 'string', valueName: 'N', description: 'CPU threads (default: all cores)' },
    'weight-layout': WEIGHT_LAYOUT_OPTION,
    'no-shard-cache': { type: 'boolean', description: 'Build the stage graphs in memory instead of using the shard cache on disk' },
    'chat-template': {
      type: 'string',
      valueName: 'FILE|NAME',
      description: "Use this Jinja chat template instead of the model's: a file, or chatml, llama3, gemma, mistral or plain",
    },
    'log-requests': { type: 'boolean', description: 'Print one line per request: method, path, status, milliseconds, tokens' },
    json: { type: 'boolean', description: 'Print one JSON object per event' },
  },
  async run(ctx) {
    const lan = booleanOption(ctx, 'lan');
    if (lan && stringOption(ctx, 'host') !== undefined) throw new KiwiError('USAGE', 'give either --lan or --host, not both');
    const host = lan ? '0.0.0.0' : (stringOption(ctx, 'host') ?? '127.0.0.1');
    const port = intOption(stringOption(ctx, 'port') ?? '8080', 'port', 0, 65535);
    const parallel = intOption(stringOption(ctx, 'parallel') ?? '8', 'parallel', 1, 256);
    const maxQueue = intOption(stringOption(ctx, 'max-queue') ?? '64', 'max-queue', 0, 100_000);
    const kvCacheMb = intOption(stringOption(ctx, 'kv-cache-mb') ?? '1024', 'kv-cache-mb', 1, 1_048_576);
    const promptCacheMb = intOption(stringOption(ctx, 'prompt-cache-mb') ?? '256', 'prompt-cache-mb', 0, 1_048_576);
    const draftModel = stringOption(ctx, 'draft-model');
    const speculative = withVerify(parseSpeculative(stringOption(ctx, 'speculative') ?? (draftModel !== undefined ? 'auto' : 'off')), stringOption(ctx, 'speculative-verify'));
    const provider = stringOption(ctx, 'provider');
    if (provider !== undefined && !PROVIDERS.includes(provider as ExecutionProvider)) {
      throw new KiwiError('USAGE', `--provider must be one of ${PROVIDERS.join(', ')}, got '${provider}'`);
    }
    const weightLayout = weightLayoutFlag(ctx);
    const threadsText = stringOption(ctx, 'threads');
    const threads = threadsText !== undefined ? intOption(threadsText, 'threads', 1, 1024) : undefined;
    const splitText = stringOption(ctx, 'split');
    const apiKey = stringOption(ctx, 'api-key') ?? (process.env.KIWI_API_KEY || undefined);
    const json = booleanOption(ctx, 'json');
    const print = eventPrinter(ctx.stdout, json);
    const templateOption = stringOption(ctx, 'chat-template');
    const chatTemplate = templateOption !== undefined ? resolveChatTemplate(templateOption) : undefined;
    const logRequests = booleanOption(ctx, 'log-requests');
    const browserPolicy = apiBrowserPolicy(ctx);
    // After the other flags are checked, so a typo fails before a long download.
    const { path: modelPath, embedded } = await resolveModelArg(stringOption(ctx, 'model'), {
      useDefault: true, sha256: stringOption(ctx, 'model-sha256'), print, signal: ctx.signal,
    });
    if (embedded) print('model', { path: modelPath, embedded: true }, `No --model given: serving the embedded ${modelPath} (a tiny story model; prompt it with the start of a story)`);

    const { backend, server, load, close } = await createLocalServer({
      modelPath,
      backend: {
        ...(splitText !== undefined ? { split: parseSplit(splitText) } : {}),
        ...(provider !== undefined ? { provider: provider as ExecutionProvider } : {}),
        ...(threads !== undefined ? { threads } : {}),
        weightLayout,
        shardCache: !booleanOption(ctx, 'no-shard-cache'),
        maxBatch: parallel,
        kvBudgetBytes: kvCacheMb * 1024 * 1024,
        promptCacheBytes: promptCacheMb * 1024 * 1024,
        speculative,
        ...(draftModel !== undefined ? { draftModel } : {}),
        ...(chatTemplate !== undefined ? { chatTemplate } : {}),
      },
      api: {
        host,
        port,
        maxActive: parallel,
        maxQueue,
        ...browserPolicy,
        ...(apiKey !== undefined ? { apiKey } : {}),
        onError: (err) => ctx.stderr.write(`kiwi serve: request failed: ${(err as Error)?.stack ?? String(err)}\n`),
        ...(logRequests ? { onRequestDone: (e: RequestLogEntry) => print('request', { ...e, ms: Math.round(e.ms) }, formatRequestLog(e)) } : {}),
      },
    });
    const stopped = untilStopped(ctx.signal);
    try {
      print('loading', { model: backend.modelId, url: server.url }, `Loading ${modelPath} (the API answers 503 until it is ready)...`);
      await load();
      warnIfUnprotected(print, ctx.stderr, 'serve', host, apiKey);
      print('serving', { url: server.url, model: backend.modelId, host: server.host, port: server.port }, `Serving ${backend.modelId} at ${server.url} (Ctrl-C to stop)`);
      await stopped;
    } finally {
      await close();
    }
    print('stopped', {}, 'Stopped.');
    return 0;
  },
});
