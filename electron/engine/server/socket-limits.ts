// How long and how many sockets the API and the control API keep: a client that sends its request
// slowly, or connects and sends nothing, is cut off (408 / closed) instead of holding the server.
/** Socket bounds shared by the API and the control API (node:http server fields). */
export interface SocketLimits {
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
}

export const DEFAULT_SOCKET_LIMITS: SocketLimits = { requestTimeoutMs: 30_000, headersTimeoutMs: 10_000, keepAliveTimeoutMs: 5_000, maxConnections: 256 };

/** node:http options and fields for `limits`: node checks the timeouts every connectionsCheckingInterval. */
export function socketServerOptions(limits: SocketLimits): { requestTimeout: number; headersTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number } {
  return {
    requestTimeout: limits.requestTimeoutMs,
    headersTimeout: Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs),
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
  };
}
