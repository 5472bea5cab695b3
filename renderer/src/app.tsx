// The app shell. It talks to the engine only over the control API (address from the preload).
import type { ReactElement } from 'react';

export function App(): ReactElement {
  return (
    <main>
      <h1>Kiwi</h1>
      <p>Run a large language model together on your friends&apos; PCs.</p>
    </main>
  );
}
