#!/usr/bin/env python3
"""The chat page of `purebee-rs serve` in a real browser: Debian's Chromium, headless, driven
by Playwright (scripts/test-browser.sh runs this with the environment that
scripts/browser-env.sh makes).

Each scenario starts `target/debug/purebee-rs serve` on a free port with the tiny fixture
model on the reference engine (deterministic), so every answer the page shows can be
compared with the one the API gives directly for the same messages at temperature 0:

- markdown: the page's renderer in the browser escapes HTML, links http(s) only, renders
  fences, inline code, emphasis, headings and lists, and a code block's copy button copies.
- conversation: settings set in the page's panel and kept across a reload; invalid settings
  reported in #error and not sent; a question sent with #send streams an answer equal to the
  API's; a second one sent with Enter carries the whole conversation (checked in the request
  and by the answer); Shift+Enter is a newline; the stop button keeps a partial answer; the
  new-chat button clears the conversation. No script error and no console error.
- api key: under `--api-key`, the page asks for the key; a wrong one is reported in #error,
  the right one brings the answer, and after a reload the tab still has it.

Exits non-zero on any failure, saying which check failed; the server and the browser are
always stopped. `--screenshot PATH` saves the page mid-conversation.
"""

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "target" / "debug" / "purebee-rs"
MODEL = ROOT / "fixtures" / "bitnet-tiny" / "tiny_b158_i2_s.gguf"
CHROMIUM = "/usr/bin/chromium"
# Without the background-networking switches, Chromium's own connections (updates, sync,
# field trials) are refused on a closed network and can hold up the page's.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_S = 60
SYSTEM = "You are a helpful assistant."
MAX_TOKENS = 24

# Counts how often body[data-busy] left "1" (an answer ended), so a wait cannot miss an
# answer that started and ended between two polls.
BUSY_WATCH = """
window.__busyEnds = 0;
new MutationObserver((records) => {
  for (const r of records) if (r.oldValue === '1') window.__busyEnds += 1;
}).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-busy'], attributeOldValue: true });
"""


class Failure(Exception):
    """A check that failed, with what was expected and what was found."""


def check(condition, message):
    if not condition:
        raise Failure(message)


class Server:
    """`purebee-rs serve` on a free port (`--port 0`: it says the address on stderr)."""

    def __init__(self, *extra):
        command = [str(BINARY), "serve", str(MODEL), "--port", "0", "--engine", "ref", "--parallel", "1",
                   "-c", "2048", "--no-warmup", *extra]
        self.log = []
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        lines = queue.Queue()

        def drain():
            for line in self.process.stderr:
                self.log.append(line.rstrip())
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + TIMEOUT_S
        self.base = None
        while self.base is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None or time.monotonic() > deadline:
                self.stop()
                raise Failure("the server did not say where it listens:\n" + "\n".join(self.log[-20:]))
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.base = found.group(1).rstrip("/")
        while self.get("/health")[0] != 200:
            check(time.monotonic() < deadline and self.process.poll() is None,
                  "the server's /health never answered 200:\n" + "\n".join(self.log[-20:]))
            time.sleep(0.05)

    def get(self, path):
        try:
            with urllib.request.urlopen(self.base + path, timeout=TIMEOUT_S) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def chat(self, messages, key=None, max_tokens=MAX_TOKENS):
        """The API's own greedy, non-streaming answer to `messages`."""
        body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.base + "/v1/chat/completions", body, headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
                return json.load(r)["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as e:
            raise Failure(f"the direct API call failed: {e.code} {e.read()[:300]!r}") from e

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Page:
    """A fresh browser context on the server's page, recording the chat requests it sends,
    its script errors and its console errors."""

    def __init__(self, browser, server):
        self.context = browser.new_context(viewport={"width": 1100, "height": 800})
        self.context.add_init_script(BUSY_WATCH)
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_S * 1000)
        self.server = server
        self.requests = []  # (JSON body, Authorization header) of each chat request
        self.errors = []
        self.console_errors = []
        self.page.on("request", self._request)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))

    def _request(self, request):
        if request.url.endswith("/v1/chat/completions") and request.method == "POST":
            self.requests.append((json.loads(request.post_data), request.all_headers().get("authorization")))

    def open(self):
        self.page.goto(self.server.base + "/")
        model = json.loads(self.server.get("/v1/models")[1])["data"][0]["id"]
        self.page.wait_for_function("m => document.getElementById('model').textContent === m", arg=model)
        check(self.page.get_attribute("body", "data-busy") == "0", "body[data-busy] should be 0 at load")
        return model

    def settings(self, temperature="0", top_p="0.9", max_tokens=str(MAX_TOKENS), system=SYSTEM):
        """Fills the settings panel as a person would."""
        if self.page.is_hidden("#settings"):
            self.page.click("#settings-toggle")
        self.page.fill("#temperature", temperature)
        self.page.fill("#top-p", top_p)
        self.page.fill("#max-tokens", max_tokens)
        self.page.fill("#system-prompt", system)

    def answered(self, n):
        """Waits until `n` answers have ended and none is running."""
        self.page.wait_for_function(
            "n => window.__busyEnds >= n && document.body.dataset.busy === '0'", arg=n)

    def answers(self):
        return self.page.locator("#messages .assistant")

    def error(self):
        return "" if self.page.is_hidden("#error") else self.page.inner_text("#error").strip()

    def close(self):
        self.context.close()


def visible(text):
    """Text as compared with its rendering: markdown markers and runs of spaces dropped."""
    return re.sub(r"\s+", " ", re.sub(r"[*`#]", "", text)).strip()


def expect_answer(page, index, expected):
    answer = page.answers().nth(index)
    raw = answer.get_attribute("data-raw")
    check(raw == expected, f"answer {index + 1} differs from the API's:\n  page: {raw!r}\n  API:  {expected!r}")
    shown = answer.locator(".body").inner_text()
    check(shown.strip(), f"answer {index + 1} shows no text")
    check(visible(shown) == visible(expected), f"answer {index + 1} shows {shown!r}, the API said {expected!r}")
    meta = answer.locator(".meta").inner_text()
    check(re.match(r"^\d+ tokens? · \d+\.\d tokens/s · first token \d+\.\d\d s", meta), f"answer stats: {meta!r}")


def markdown(browser, server, shot):
    page = Page(browser, server)
    try:
        page.open()
        html = page.page.evaluate("renderMarkdown", "<script>alert(1)</script> <img src=x onerror=alert(2)>")
        check("<script" not in html and "<img" not in html and "&lt;script&gt;" in html, f"not escaped: {html}")
        html = page.page.evaluate("renderMarkdown", "[a](javascript:alert(1)) [b](https://example.com/?q=1&r=2)")
        hrefs = re.findall(r'href="[^"]*"', html)
        check(hrefs == ['href="https://example.com/?q=1&amp;r=2"'], f"only the https link should be one: {html}")
        sample = ("# Title\n\nSome **bold**, *italic* and `x < y` code.\n\n- one\n- two\n\n1. first\n2. second\n\n"
                  "```python\nprint('<b>')\n```")
        html = page.page.evaluate("renderMarkdown", sample)
        for part in ["<h1>Title</h1>", "<strong>bold</strong>", "<em>italic</em>", "<code>x &lt; y</code>",
                     "<ul><li>one</li><li>two</li></ul>", "<ol><li>first</li><li>second</li></ol>",
                     "<span>python</span>", "<pre><code>print(&#39;&lt;b&gt;&#39;)</code></pre>"]:
            check(part in html, f"the rendering lacks {part}: {html}")
        # A rendered answer's copy button puts the code's text on the clipboard.
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base)
        page.page.evaluate("s => showAnswer(addMessage('assistant', ''), s)", sample)
        page.page.click("#messages .copy")
        page.page.wait_for_function("() => document.querySelector('#messages .copy').textContent === 'Copied'")
        copied = page.page.evaluate("() => navigator.clipboard.readText()")
        check(copied == "print('<b>')", f"the copy button copied {copied!r}")
        if shot:
            page.page.screenshot(path=str(Path(shot).with_name(Path(shot).stem + "-markdown.png")))
        check(not page.errors, f"script errors: {page.errors}")
    finally:
        page.close()


def conversation(browser, server, shot):
    page = Page(browser, server)
    try:
        model = page.open()
        page.settings()
        page.page.reload()
        page.open()
        check(page.page.input_value("#temperature") == "0" and page.page.input_value("#system-prompt") == SYSTEM,
              "the settings were not kept across a reload")

        # An invalid setting is reported and nothing is sent.
        page.settings(max_tokens="")
        page.page.fill("#prompt", "Hello")
        page.page.click("#send")
        check("Max tokens" in page.error(), f"an empty max tokens should be reported, #error says {page.error()!r}")
        page.settings(top_p="2")
        page.page.click("#send")
        check("Top-p" in page.error(), f"top-p 2 should be reported, #error says {page.error()!r}")
        check(not page.requests and page.answers().count() == 0, "a request went out with invalid settings")
        page.settings()

        first = "Hello! What can you do?"
        page.page.fill("#prompt", first)
        page.page.click("#send")
        page.answered(1)
        check(page.error() == "", f"#error after the first answer: {page.error()!r}")
        check(page.page.locator("#messages .user").count() == 1 and page.answers().count() == 1, "one turn each")
        check(page.page.inner_text("#messages .user") == first, "the question shown is not the one typed")
        body, _ = page.requests[0]
        history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]
        check(body["messages"] == history, f"the first request's messages: {body['messages']}")
        check(body["model"] == model and body["stream"] is True and body["stream_options"] == {"include_usage": True}
              and body["temperature"] == 0 and body["top_p"] == 0.9 and body["max_tokens"] == MAX_TOKENS,
              f"the first request: {body}")
        first_answer = server.chat(history)
        expect_answer(page, 0, first_answer)

        # Shift+Enter is a newline and sends nothing; Enter sends.
        page.page.fill("#prompt", "")
        page.page.focus("#prompt")
        page.page.keyboard.type("line one")
        page.page.keyboard.press("Shift+Enter")
        page.page.keyboard.type("line two")
        check(page.page.input_value("#prompt") == "line one\nline two", "Shift+Enter should add a newline")
        check(len(page.requests) == 1, "Shift+Enter sent the question")
        second = "Tell me more about that."
        page.page.fill("#prompt", second)
        page.page.press("#prompt", "Enter")
        page.answered(2)
        history += [{"role": "assistant", "content": first_answer}, {"role": "user", "content": second}]
        check(page.requests[1][0]["messages"] == history,
              f"the second request should carry the whole conversation: {page.requests[1][0]['messages']}")
        check(page.answers().count() == 2, f"{page.answers().count()} answers, expected 2")
        expect_answer(page, 1, server.chat(history))
        if shot:
            page.page.screenshot(path=shot)

        # Stop: the partial answer stays, marked as stopped.
        page.settings(max_tokens="1500")
        page.page.fill("#prompt", "Write a long story.")
        page.page.click("#send")
        page.page.wait_for_function(
            "() => document.querySelectorAll('#messages .assistant')[2]?.dataset.raw?.length > 0")
        page.page.click("#stop")
        page.answered(3)
        third = page.answers().nth(2)
        meta = third.locator(".meta").inner_text()
        check("stopped" in meta, f"a stopped answer should say so: {meta!r}")
        tokens = int(meta.split()[0])
        check(0 < tokens < 1500 and third.get_attribute("data-raw"), f"the partial answer: {meta!r}")
        check(page.error() == "", f"#error after stop: {page.error()!r}")

        # New chat: the conversation is cleared and the next question goes alone.
        page.settings()
        page.page.click("#new-chat")
        check(page.page.locator("#messages > *").count() == 0, "new chat should clear #messages")
        page.page.fill("#prompt", first)
        page.page.click("#send")
        page.answered(4)
        check(page.requests[-1][0]["messages"] == history[:2], f"after new chat: {page.requests[-1][0]['messages']}")
        expect_answer(page, 0, first_answer)
        check(not page.errors, f"script errors: {page.errors}")
        check(not page.console_errors, f"console errors: {page.console_errors}")
    finally:
        page.close()


def api_key(browser, server, shot):
    page = Page(browser, server)
    try:
        page.open()
        # The settings straight in localStorage this time, before the page reads them.
        settings = {"temperature": "0", "topP": "0.9", "maxTokens": str(MAX_TOKENS), "system": SYSTEM}
        page.page.evaluate("s => localStorage.setItem('purebee.settings', JSON.stringify(s))", settings)
        page.page.reload()
        page.open()
        question = "Hello there"
        page.page.fill("#prompt", question)
        page.page.click("#send")
        page.page.wait_for_selector("#api-key", state="visible")
        page.answered(1)
        check(page.error() == "", f"asking for the key is not an error: {page.error()!r}")
        check(page.requests[0][1] is None, "the first request should carry no key")

        page.page.fill("#api-key", "wrong")
        page.page.click("#key-save")
        page.answered(2)
        check("invalid API key" in page.error(), f"a wrong key should be reported, #error says {page.error()!r}")
        check(page.page.is_visible("#api-key"), "the page should ask for the key again")
        check(page.requests[1][1] == "Bearer wrong", f"the wrong key was sent as {page.requests[1][1]!r}")
        if shot:
            page.page.screenshot(path=str(Path(shot).with_name(Path(shot).stem + "-key.png")))

        page.page.fill("#api-key", "secret")
        page.page.click("#key-save")
        page.answered(3)
        check(page.error() == "", f"#error after the right key: {page.error()!r}")
        check(page.page.is_hidden("#key-panel"), "the key panel should close")
        check(page.requests[2][1] == "Bearer secret", f"the key was sent as {page.requests[2][1]!r}")
        history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        expect_answer(page, 0, server.chat(history, key="secret"))

        # The tab keeps the key: after a reload the question goes through at once.
        page.page.reload()
        page.open()
        page.page.fill("#prompt", question)
        page.page.click("#send")
        page.answered(1)
        check(page.page.is_hidden("#key-panel") and page.error() == "", "the key was not kept for the tab")
        check(page.requests[3][1] == "Bearer secret", "the kept key was not sent")
        check(not page.errors, f"script errors: {page.errors}")
    finally:
        page.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screenshot", help="save the page mid-conversation to this PNG")
    args = parser.parse_args()
    # A SIGTERM (a CI timeout) unwinds like an error, so the server and the browser still stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for path, what in [(BINARY, "build it: cargo build -p purebee-cli"), (MODEL, "the fixture model"),
                       (Path(CHROMIUM), "install Debian's chromium: scripts/browser-env.sh")]:
        if not path.exists():
            sys.exit(f"FAIL: {path} is missing ({what})")
    scenarios = [("markdown", markdown, ()), ("conversation", conversation, ()),
                 ("api key", api_key, ("--api-key", "secret"))]
    failed = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for name, scenario, flags in scenarios:
                start = time.monotonic()
                server = None
                try:
                    server = Server(*flags)
                    scenario(browser, server, args.screenshot)
                    print(f"ok: {name} ({time.monotonic() - start:.1f} s)", flush=True)
                except Exception as e:  # every failure is reported, and the next scenario runs
                    failed.append(name)
                    print(f"FAIL: {name}: {type(e).__name__}: {e}", flush=True)
                    if server:
                        print("  server log:\n    " + "\n    ".join(server.log[-15:]), flush=True)
                finally:
                    if server:
                        server.stop()
        finally:
            browser.close()
    print(f"browser tests: {len(scenarios) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
