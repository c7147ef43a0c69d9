// The demo page: loads a GGUF (by URL, cached in the browser, or from a file) into the
// wasm module, runs it on WebGPU when the browser has an adapter (else on the CPU engine),
// and chats. `?model=URL&prompt=TEXT&n=N&temp=T&engine=cpu|webgpu&autorun=1` runs one
// text completion instead and writes it into #output (tests use that contract).
import init, { ModelBytes, loadModel, webgpuAvailable } from "./pkg/purebee_web.js";
import { nextTask, waitUntil } from "./next_task.js";

const $ = (id) => document.getElementById(id);
const CACHE = "purebee-models";

let model = null;
let conversation = [];
let stopping = false;

function showError(e) {
  $("error").textContent = e instanceof Error ? e.message : String(e);
}

function setBusy(busy) {
  document.body.dataset.busy = busy ? "1" : "0";
  $("send").disabled = busy || !model;
  $("prompt").disabled = !model;
  $("stop").disabled = !busy;
}

// Reads `response`'s body into a ModelBytes, showing progress.
async function gather(response, total) {
  const bytes = new ModelBytes(total || 0);
  const reader = response.body.getReader();
  const bar = $("progress");
  bar.hidden = false;
  bar.max = total || 1;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes.push(value);
    bar.value = total ? bytes.length : 0;
    $("status").textContent = `loading: ${(bytes.length / 1e6).toFixed(1)} MB` + (total ? ` of ${(total / 1e6).toFixed(1)} MB` : "");
  }
  bar.hidden = true;
  return bytes;
}

// The file at `url`, from the browser's cache when it was loaded before.
async function fetchModel(url) {
  let cache = null;
  try {
    cache = await caches.open(CACHE);
    const hit = await cache.match(url);
    if (hit) return gather(hit, Number(hit.headers.get("content-length")));
  } catch (e) {
    console.warn("no Cache API here:", e);
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const total = Number(response.headers.get("content-length"));
  if (!cache) return gather(response, total);
  // One copy of the stream to the cache, one to the module.
  const [mine, cached] = response.body.tee();
  cache.put(url, new Response(cached, { headers: response.headers })).catch((e) => console.warn("not cached:", e));
  return gather(new Response(mine), total);
}

// WebGPU when asked for, or when `auto` finds a hardware adapter: a software fallback
// adapter (SwiftShader's, isFallbackAdapter) emulates a GPU on the CPU, far slower than the
// CPU engine (docs/benchmarks.md, "In a browser"), so `auto` takes the CPU engine there and
// says why. Asking for `webgpu` where there is no adapter is an error (loadModel says so),
// never a silent fall back.
async function chooseEngine(asked) {
  if (asked !== "auto") return { engine: asked, why: "" };
  const adapter = await navigator.gpu?.requestAdapter().catch(() => null);
  if (adapter?.info?.isFallbackAdapter) {
    return { engine: "cpu", why: " (the WebGPU adapter is a software fallback, slower than the CPU engine)" };
  }
  return { engine: (await webgpuAvailable()) ? "webgpu" : "cpu", why: "" };
}

// Loads the model that `bytes()` reads (called again for a second try) on the engine asked
// for. Under `auto`, a WebGPU that fails to run the model (a kernel its compiler rejects,
// too little memory) falls back to the CPU engine, and the model line says why.
async function load(name, bytes, askedEngine) {
  $("error").textContent = "";
  model?.free();
  model = null;
  setBusy(true);
  try {
    const { engine, why } = await chooseEngine(askedEngine);
    const started = performance.now();
    try {
      model = await loadOn(name, await bytes(), engine);
      $("model-info").textContent += why;
      // WebGPU compiles its kernels on the first pass: one token now, so that a kernel
      // this browser's compiler rejects shows here, where `auto` can still fall back.
      if (askedEngine === "auto" && engine === "webgpu") {
        model.startCompletion(" ", 1, 0, 1, 1, 0, 0);
        await run(() => {});
      }
    } catch (e) {
      model?.free();
      model = null;
      if (askedEngine !== "auto" || engine !== "webgpu") throw e;
      console.warn("WebGPU failed, falling back to the CPU engine:", e);
      model = await loadOn(name, await bytes(), "cpu");
      $("model-info").textContent += ` (WebGPU failed: ${e.message ?? e})`;
    }
    $("status").textContent = `loaded in ${((performance.now() - started) / 1000).toFixed(1)} s`;
    return model;
  } finally {
    setBusy(false);
  }
}

async function loadOn(name, bytes, engine) {
  $("status").textContent = `starting the ${engine} engine…`;
  const defaultLimits = new URLSearchParams(location.search).get("limits") === "default";
  const loaded = await loadModel(name, bytes, engine, Number($("ctx").value) || 2048, defaultLimits);
  $("engine-badge").textContent = loaded.engine;
  $("engine-badge").hidden = false;
  $("model-info").textContent = `${name} · ${loaded.describe()}`;
  return loaded;
}

// Runs the generation started on `model`, handing each piece of text to `onText`; returns
// the decode speed.
async function run(onText) {
  let first = 0;
  stopping = false;
  while (!model.done()) {
    if (stopping) { model.stop(); break; }
    model.beginStep();
    await waitUntil(() => model.stepReady());
    const piece = model.finishStep();
    if (model.generatedTokens() === 1 && !first) first = performance.now();
    if (piece) onText(piece);
    // Let the page paint between tokens on the CPU engine too.
    await nextTask();
  }
  const n = model.generatedTokens();
  const seconds = (performance.now() - first) / 1000;
  return { tokens: n, perSecond: n > 1 && seconds > 0 ? (n - 1) / seconds : 0, reason: model.finishReason() };
}

function samplerArgs(temp) {
  return [temp, 40, 0.95, 0.05, Math.floor(Math.random() * 2 ** 32)];
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = `message ${role}`;
  div.textContent = text;
  $("messages").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

async function send(text) {
  if (!model || !text.trim()) return;
  $("error").textContent = "";
  conversation.push(["user", text]);
  addMessage("user", text);
  const out = addMessage("assistant", "");
  let reply = "";
  setBusy(true);
  try {
    const max = Number($("max-tokens").value) || 256;
    const temp = Number($("temp").value);
    if (model.hasChatTemplate()) {
      model.startChat(conversation.map((m) => m[0]), conversation.map((m) => m[1]), max, ...samplerArgs(temp));
    } else {
      model.startCompletion(conversation.map((m) => m[1]).join("\n"), max, ...samplerArgs(temp));
    }
    const speed = await run((piece) => { reply += piece; out.textContent = reply; });
    conversation.push(["assistant", reply]);
    const stats = document.createElement("span");
    stats.className = "stats";
    stats.textContent = `${speed.tokens} tokens · ${speed.perSecond.toFixed(1)} tokens/s · ${model.engine}`;
    out.append(stats);
  } catch (e) {
    showError(e);
  } finally {
    setBusy(false);
  }
}

// The test contract: one completion of `prompt`, written into #output.
async function autorun(params) {
  const out = $("output");
  out.hidden = false;
  const url = params.get("model");
  await load(url.split("/").pop(), () => fetchModel(url), params.get("engine") || "auto");
  const temp = Number(params.get("temp") ?? 0);
  const started = performance.now();
  let firstToken = 0;
  model.startCompletion(params.get("prompt") ?? "", Number(params.get("n") ?? 32), ...samplerArgs(temp));
  let text = "";
  const speed = await run((piece) => {
    if (!firstToken) firstToken = performance.now();
    text += piece;
    out.textContent = text;
  });
  // Speed, for tests/browser/wasm_page.py --speed: the prompt's tokens and the time to the
  // first generated token (prefill and one step), and the decode rate after it.
  out.dataset.promptTokens = String(model.promptTokens());
  out.dataset.firstTokenMs = String((firstToken || performance.now()) - started);
  out.dataset.decodeTokensPerSecond = String(speed.perSecond);
  out.dataset.engine = model.engine;
  out.dataset.done = "1";
}

async function main() {
  await init();
  const params = new URLSearchParams(location.search);
  if (params.get("model")) $("model-url").value = params.get("model");
  if (params.get("engine")) $("engine").value = params.get("engine");
  $("load-url").onclick = () => {
    const url = $("model-url").value.trim();
    if (url) load(url.split("/").pop(), () => fetchModel(url), $("engine").value).catch(showError);
  };
  $("model-file").onchange = (e) => {
    const file = e.target.files[0];
    if (file) load(file.name, () => gather(new Response(file), file.size), $("engine").value).catch(showError);
  };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = $("prompt").value;
    $("prompt").value = "";
    send(text);
  };
  $("prompt").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  };
  $("stop").onclick = () => { stopping = true; };
  $("new-chat").onclick = () => { conversation = []; $("messages").replaceChildren(); };
  if (params.get("autorun") === "1" && params.get("model")) {
    await autorun(params).catch((e) => { showError(e); setBusy(false); });
  }
}

main().catch(showError);
