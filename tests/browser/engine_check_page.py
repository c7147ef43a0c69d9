#!/usr/bin/env python3
"""The engine check page (web/dist/check.html, built by scripts/build-web.sh) in headless
Chromium: each instruction family on the page's engine against the reference engine, both
compiled to wasm32, over the fixed cases of purebee-web's `engine_check`. On `webgpu` this
proves the GPU engine's kernels as the browser compiles (Tint) and runs (SwiftShader) them.

Exits non-zero when a case fails or the page reports an error, printing each failure.
`--engines webgpu,cpu` picks the engines (both by default).
"""

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wasm_page import CHROMIUM, CHROMIUM_ARGS, DIST, ROOT, Handler, wait_done  # noqa: E402

TIMEOUT_S = 300


def check(page, port: int, engine: str) -> list[str]:
    page.goto(f"http://127.0.0.1:{port}/web/dist/check.html?engine={engine}")
    error = wait_done(page, "#summary", TIMEOUT_S)
    if error:
        return [f"{engine}: the page reports: {error}"]
    print(f"{engine}: {page.text_content('#summary')}")
    rows = page.inner_text("#results").splitlines()
    return [f"{engine}: {r}" for r in rows if r.startswith("FAIL")]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="webgpu,cpu")
    args = parser.parse_args()
    if not (DIST / "check.html").exists():
        print(f"error: {DIST} is not built: run scripts/build-web.sh", file=sys.stderr)
        return 1
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(ROOT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    failures = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for engine in args.engines.split(","):
                    page = browser.new_page()
                    try:
                        failures += check(page, server.server_address[1], engine)
                    finally:
                        page.close()
            finally:
                browser.close()
    finally:
        server.shutdown()
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
