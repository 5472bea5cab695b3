import { describeLinkCompliance } from '../test-support/link-compliance.js';
import { createMemoryLinkPair, type Link } from './link.js';
import { dialDirect, listenDirect } from './ws.js';

describeLinkCompliance('in-memory', async () => {
  const [a, b] = createMemoryLinkPair();
  return { a, b, wire: [], cleanup: async () => undefined };
});

describeLinkCompliance('direct WebSocket', async () => {
  let accepted: (link: Link) => void = () => undefined;
  const incoming = new Promise<Link>((resolve) => (accepted = resolve));
  const listener = await listenDirect({ host: '127.0.0.1', maxPayloadBytes: 17 * 1024 * 1024, onLink: (link) => accepted(link) });
  const a = await dialDirect(listener.url, { maxPayloadBytes: 17 * 1024 * 1024, timeoutMs: 3000 });
  const b = await incoming;
  return {
    a, b, wire: [],
    cleanup: async () => {
      a.close();
      b.close();
      await listener.close();
    },
  };
});
