// The next macrotask: a WebGPU read (mapAsync) resolves only when the event loop runs.
// A MessageChannel message is not clamped to 4 ms as nested setTimeout calls are.
const channel = new MessageChannel();
const waiting = [];
channel.port1.onmessage = () => waiting.shift()?.();
export function nextTask() {
  return new Promise((resolve) => {
    waiting.push(resolve);
    channel.port2.postMessage(0);
  });
}

// How long waitUntil polls on every task before it polls once a millisecond.
const SPIN_MS = 30;

// Resolves when `ready()` is true. It polls on every task at first (the lowest latency: a
// GPU step takes milliseconds), then once a millisecond, so that a slow step (a software
// adapter that shares the machine's cores with this tab) does not keep a core busy polling.
export async function waitUntil(ready) {
  const start = performance.now();
  while (!ready()) {
    if (performance.now() - start < SPIN_MS) await nextTask();
    else await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
