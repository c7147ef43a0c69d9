#!/usr/bin/env python3
"""Concurrent clients against an OpenAI-compatible server (purebee-rs serve, llama-server):
N clients at once, each sending R greedy /v1/completions requests of its own prompt, and the
aggregate generated tokens per second over the wall time of the whole run.

usage: serve-load.py URL [--clients N] [--requests R] [--max-tokens T] [--json]

Uses only the standard library. Each request asks for exactly T tokens (`ignore_eos`), so
every server generates the same count; the figure counts `usage.completion_tokens`.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "The history of the printing press begins",
    "In the middle of the ocean there is",
    "A recipe for bread needs flour, water and",
    "The first rule of writing good software is",
    "Mountains form over millions of years when",
    "The train left the station at dawn and",
    "Every language has words for colours such as",
    "When the library opened its doors the people",
    "The small robot looked at the garden and",
    "Astronomers measure the distance to stars by",
    "The market was busy with traders selling",
    "On the first day of school the teacher said",
    "A river carries sediment down to the sea where",
    "The old clock in the hall struck twelve and",
    "Bees communicate the location of flowers by",
    "The engineer opened the laptop and started",
]


def complete(url, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        answer = json.load(r)
    return answer["usage"]["completion_tokens"], answer["choices"][0]["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # One warm-up request, not counted.
    complete(args.url, PROMPTS[-1], 4)
    tokens = [0] * args.clients
    texts = [[] for _ in range(args.clients)]
    errors = []

    def client(i):
        try:
            for r in range(args.requests):
                n, text = complete(args.url, PROMPTS[(i + r * args.clients) % len(PROMPTS)], args.max_tokens)
                tokens[i] += n
                texts[i].append(text)
        except Exception as e:  # reported below
            errors.append(f"client {i}: {e}")

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    if errors:
        sys.exit("\n".join(errors))
    total = sum(tokens)
    result = {"clients": args.clients, "requests_per_client": args.requests, "max_tokens": args.max_tokens,
              "completion_tokens": total, "seconds": wall, "tokens_per_s": total / wall, "texts": texts}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.clients} clients x {args.requests} requests: {total} tokens in {wall:.1f} s = "
              f"{total / wall:.2f} tokens/s")


if __name__ == "__main__":
    main()
