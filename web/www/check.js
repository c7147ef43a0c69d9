// The engine check page: runs every case of purebee-web's engine check on the engine that
// `?engine=` names (webgpu by default, or cpu) and lists each case with its outcome.
// For tests: #summary[data-done="1"] when finished, with data-failed (the count) and
// data-total; any error that stops the check is in #error.
import init, { startEngineCheck } from "./pkg/purebee_web.js";
import { waitUntil } from "./next_task.js";

const $ = (id) => document.getElementById(id);

function row(name, failure) {
  const tr = document.createElement("tr");
  const status = document.createElement("td");
  status.textContent = failure ? "FAIL" : "ok";
  status.className = failure ? "error" : "ok";
  const what = document.createElement("td");
  what.textContent = failure ? `${name}: ${failure}` : name;
  tr.append(status, what);
  $("results").tBodies[0].append(tr);
}

async function main() {
  const engine = new URLSearchParams(location.search).get("engine") || "webgpu";
  $("engine-badge").textContent = engine;
  await init();
  const check = await startEngineCheck(engine);
  let failed = 0;
  let done = 0;
  const start = performance.now();
  while (!check.done()) {
    check.begin();
    await waitUntil(() => check.ready());
    const failure = check.finish();
    if (failure) failed += 1;
    done += 1;
    row(check.last, failure);
    $("summary").textContent = `${done} of ${check.total} cases, ${failed} failed`;
  }
  const seconds = ((performance.now() - start) / 1000).toFixed(1);
  $("summary").textContent = `${done} cases on ${engine} in ${seconds} s: ` +
    (failed ? `${failed} failed` : "all agree with the reference");
  $("summary").dataset.failed = String(failed);
  $("summary").dataset.total = String(done);
  $("summary").dataset.done = "1";
}

main().catch((e) => {
  $("error").textContent = String(e?.message ?? e);
});
