#!/usr/bin/env python3
"""Every WGSL module the GPU engine may create in a browser, compiled by the browser's own
WGSL compiler (Chromium's Tint, on its software adapter, SwiftShader), not only by naga.

Tint applies WGSL's rules where naga is lenient (uniformity analysis around barriers,
constant-expression evaluation), so a kernel naga accepts may not compile in a browser.
This check shows every module's errors at once. The modules come from the engine itself
(`cargo run -p purebee-engine-gpu --example wgsl_modules`); those that use subgroup
operations are skipped, as a browser build never creates them.

`wgsl_compile.py FILE.wgsl ...` compiles those files instead (to try a kernel out).

Exits non-zero when a module has an error, printing each error with its module and line,
and the compiler's notes on it (where a value became non-uniform).
"""

import http.server
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wasm_page import CHROMIUM, CHROMIUM_ARGS, ROOT  # noqa: E402

COMPILE_ALL = """async (modules) => {
  if (!navigator.gpu) return {fatal: 'navigator.gpu is missing'};
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return {fatal: 'no WebGPU adapter'};
  const device = await adapter.requestDevice();
  const results = [];
  for (const m of modules) {
    const module = device.createShaderModule({label: m.name, code: m.source});
    const info = await module.getCompilationInfo();
    const failed = info.messages.some((msg) => msg.type === 'error');
    const errors = failed ? info.messages.map((msg) =>
      `${m.name}:${msg.lineNum}:${msg.linePos}: ${msg.type}: ${msg.message}`) : [];
    results.push({name: m.name, errors});
  }
  return {results};
}"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def engine_modules(out: Path) -> list[dict]:
    subprocess.run(["cargo", "run", "-q", "--locked", "-p", "purebee-engine-gpu", "--example", "wgsl_modules",
                    "--", str(out)], check=True, cwd=ROOT)
    modules = []
    for line in (out / "modules.tsv").read_text().splitlines():
        file, subgroups, name = line.split("\t", 2)
        if subgroups == "0":
            modules.append({"name": name, "source": (out / file).read_text()})
    return modules


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(f) for f in sys.argv[1:]]
        modules = ([{"name": str(f), "source": f.read_text()} for f in files] if files
                   else engine_modules(Path(tmp)))
        (Path(tmp) / "index.html").write_text("<!doctype html><title>wgsl</title>")
        handler = lambda *a, **k: QuietHandler(*a, directory=tmp, **k)  # noqa: E731
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page()
                    page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
                    outcome = page.evaluate(COMPILE_ALL, modules)
                finally:
                    browser.close()
        finally:
            server.shutdown()
    if "fatal" in outcome:
        print(f"wgsl_compile: {outcome['fatal']}", file=sys.stderr)
        return 1
    failed = [r for r in outcome["results"] if r["errors"]]
    for r in failed:
        for e in r["errors"]:
            print(e, file=sys.stderr)
    print(f"wgsl_compile: {len(outcome['results']) - len(failed)} of {len(outcome['results'])} modules compile in Chromium")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
