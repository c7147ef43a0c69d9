#!/usr/bin/env python3
"""The browser demo (web/dist, built by scripts/build-web.sh) in a real browser: Debian's
Chromium, headless, driven by Playwright, with WebGPU on its software adapter (SwiftShader).

For each tiny fixture model and each engine (the wasm CPU engine and WebGPU), the page's test
contract `index.html?model=URL&prompt=TEXT&n=N&temp=0&engine=E&autorun=1` must write the
text that `purebee-rs run MODEL -p TEXT -n N --temp 0` writes into #output, with
#output[data-engine] naming the engine that ran. A page that cannot run (no adapter, a
load error) shows #error, which fails the check with its message. `engine=auto` must give
the same text on whichever engine it ran (WebGPU on a hardware adapter that runs the model,
else the CPU; the CPU on a software fallback adapter such as SwiftShader).

Exits non-zero on any failure, saying which check failed; the file server and the browser
are always stopped. `--engines cpu,webgpu,auto` picks the engines (all three by default);
`--models a,b` picks fixtures; `--gguf PATH` runs any model file instead (served from where
it lies). `--speed` also prints each page run's prompt and decode speed, `--tokens N` sets
the tokens generated, `--limits default` asks WebGPU for its default limits, and
`--timeout S` bounds each page run.
"""

import argparse
import functools
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "target" / "debug" / "purebee-rs"
DIST = ROOT / "web" / "dist"
FIXTURES = ROOT / "fixtures" / "bitnet-tiny"
MODELS = ["tiny_b158_i2_s", "tiny_b158_tq1_0", "tiny_bitnet_tq2_0"]
CHROMIUM = "/usr/bin/chromium"
# WebGPU on Chromium's software adapter; the background-networking switches keep Chromium's
# own connections (refused on a closed network) from holding up the page's.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--enable-unsafe-webgpu", "--enable-features=Vulkan",
    "--use-webgpu-adapter=swiftshader", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PROMPT = "Once upon a time"
# Whether the page's WebGPU adapter is a software fallback (where `auto` must take the CPU).
FALLBACK_ADAPTER = "async () => !!(await navigator.gpu?.requestAdapter())?.info?.isFallbackAdapter"
TOKENS = 24
TIMEOUT_S = 120


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the repository: the page under /web/dist, the models under /fixtures, and the
    files of EXTRA (`--gguf`) under /extra/NAME."""

    EXTRA: dict[str, Path] = {}

    def translate_path(self, path):
        name = urllib.parse.unquote(path.split("?", 1)[0]).removeprefix("/extra/")
        if path.startswith("/extra/") and name in self.EXTRA:
            return str(self.EXTRA[name])
        return super().translate_path(path)

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".js": "text/javascript", ".gguf": "application/octet-stream"}

    def log_message(self, *args):
        pass


def cli_run(model: Path, tokens: int) -> dict:
    out = subprocess.run(
        [str(BINARY), "run", str(model), "-p", PROMPT, "-n", str(tokens), "--temp", "0", "--output", "json"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)


def wait_done(page, done: str, timeout_s: int) -> str:
    """Waits until the element `done` has data-done="1" or #error has text (the pages' test
    contract); returns #error's text ("" when the page finished)."""
    page.wait_for_function(
        f"document.querySelector({done!r})?.dataset.done === '1'"
        " || document.querySelector('#error')?.textContent.length > 0",
        timeout=timeout_s * 1000,
    )
    return page.text_content("#error") or ""


def run_page(page, port: int, url: str, engine: str, tokens: int, limits: str, timeout_s: int) -> dict:
    query = urllib.parse.urlencode({
        "model": url, "prompt": PROMPT, "n": tokens, "temp": 0, "engine": engine, "autorun": 1, "limits": limits,
    })
    page.goto(f"http://127.0.0.1:{port}/web/dist/index.html?{query}")
    error = wait_done(page, "#output", timeout_s)
    if error:
        raise AssertionError(f"{url} on {engine}: the page reports: {error}")
    data = page.eval_on_selector("#output", "e => ({...e.dataset})")
    data["text"] = page.text_content("#output") or ""
    return data


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="cpu,webgpu,auto")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--gguf", type=Path, action="append", default=[])
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--limits", choices=["adapter", "default"], default="adapter")
    parser.add_argument("--timeout", type=int, default=TIMEOUT_S)
    args = parser.parse_args()
    engines = args.engines.split(",")
    if not set(engines) <= {"cpu", "webgpu", "auto"}:
        print(f"error: --engines {args.engines}: each is cpu, webgpu or auto", file=sys.stderr)
        return 2
    if not (DIST / "index.html").exists():
        print(f"error: {DIST} is not built: run scripts/build-web.sh", file=sys.stderr)
        return 1
    # (what to call it, its path, its URL on the file server)
    models = [(m, FIXTURES / f"{m}.gguf", f"/fixtures/bitnet-tiny/{m}.gguf") for m in args.models.split(",")]
    if args.gguf:
        Handler.EXTRA = {p.name: p.resolve() for p in args.gguf}
        models = [(p.name, p, f"/extra/{p.name}") for p in args.gguf]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(ROOT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    failures = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for name, path, url in models:
                    want = cli_run(path, args.tokens)["text"]
                    for engine in engines:
                        page = browser.new_page()
                        errors, console = [], []
                        page.on("pageerror", lambda e: errors.append(str(e)))
                        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
                        start = time.monotonic()
                        try:
                            got = run_page(page, port, url, engine, args.tokens, args.limits, args.timeout)
                            text, ran = got["text"], got.get("engine", "")
                            if ran != engine and not (engine == "auto" and ran in ("cpu", "webgpu")):
                                raise AssertionError(f"{name}: asked for {engine}, data-engine says {ran!r}")
                            if engine == "auto" and ran == "webgpu" and page.evaluate(FALLBACK_ADAPTER):
                                raise AssertionError(f"{name}: auto chose WebGPU on a software fallback adapter")
                            if text != want:
                                raise AssertionError(f"{name} on {engine}: the page wrote {text!r}, the CLI {want!r}")
                            if errors:
                                raise AssertionError(f"{name} on {engine}: script errors: {errors}")
                            print(f"ok: {name} on {engine} ({time.monotonic() - start:.1f} s): {text!r}")
                            if args.speed:
                                print(f"  speed: {got['promptTokens']} prompt tokens, first token after "
                                      f"{float(got['firstTokenMs']):.0f} ms; decode "
                                      f"{float(got['decodeTokensPerSecond']):.2f} tokens/s")
                        except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
                            failures.append(str(e))
                            print(f"FAIL: {e}", file=sys.stderr)
                            for line in console[-20:]:
                                print(f"  console {line}", file=sys.stderr)
                        finally:
                            page.close()
            finally:
                browser.close()
    finally:
        server.shutdown()
    if failures:
        print(f"{len(failures)} browser check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
