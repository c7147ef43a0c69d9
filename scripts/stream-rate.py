#!/usr/bin/env python3
"""Decode speed as a chat client sees it, against an OpenAI-compatible server (purebee-rs
serve, llama-server): each prompt of a file (prompts separated by lines of `---`) is sent to
/v1/chat/completions as one user message, greedy and streamed, and its decode rate is
taken from the stream: the tokens after the first over the time from the first to the
last (prefill excluded). Prints one JSON object: per prompt the rate, token count and text.

usage: stream-rate.py URL PROMPTS [--max-tokens T] [--repetitions R]

Uses only the standard library. Tokens are counted from the final usage (`stream_options`
include_usage), else one per streamed chunk with content.
"""
import argparse
import json
import time
import urllib.request


def prompts_of(path):
    out, cur = [], []
    for line in open(path, encoding="utf-8").read().split("\n") + ["---"]:
        if line.rstrip() == "---":
            if "".join(cur).strip():
                out.append("\n".join(cur).strip("\n"))
            cur = []
        else:
            cur.append(line)
    return out


def stream(url, prompt, max_tokens):
    body = json.dumps({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    first = last = None
    chunks, usage, text = 0, None, []
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chunks += 1
                    text.append(piece)
    tokens = usage["completion_tokens"] if usage else chunks
    rate = (tokens - 1) / (last - first) if first and last and last > first else 0.0
    return rate, tokens, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("prompts")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repetitions", type=int, default=1)
    args = ap.parse_args()
    stream(args.url, "Hello", 4)  # warm-up, not counted
    results = []
    for i, p in enumerate(prompts_of(args.prompts)):
        runs = [stream(args.url, p, args.max_tokens) for _ in range(args.repetitions)]
        results.append({"prompt": i + 1, "rates": [r[0] for r in runs], "tokens": runs[-1][1],
                        "text": runs[-1][2]})
    print(json.dumps({"url": args.url, "prompts": results}))


if __name__ == "__main__":
    main()
