"""Drives a running purebee-rs server with the official `openai` package.

Usage: check_client.py BASE_URL API_KEY   (BASE_URL ends in /v1)

Checks chat and completions, streaming and not, stream_options.include_usage, stop
strings, the prompt cache, log-probabilities on both, and that errors come back as the client's typed exceptions.
Greedy decoding (temperature 0) and ignore_eos make every answer deterministic. Exits
non-zero on the first failed check; prints one line per check.
"""

import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=60, max_retries=0)
greedy = {"temperature": 0, "extra_body": {"ignore_eos": True}}
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


model = client.models.list().data[0].id
check(model.endswith(".gguf"), f"models.list names the model ({model})")

messages = [{"role": "user", "content": "Tell me a story"}]
whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8, **greedy)
text = whole.choices[0].message.content
check(whole.object == "chat.completion" and whole.choices[0].message.role == "assistant", "chat answer shape")
check(whole.choices[0].finish_reason == "length", "chat finish_reason length at max_tokens")
check(whole.usage.completion_tokens == 8, "chat usage counts 8 tokens")
check(whole.usage.total_tokens == whole.usage.prompt_tokens + 8, "chat usage total")

again = client.chat.completions.create(model=model, messages=messages, max_tokens=8, **greedy)
cached = again.usage.prompt_tokens_details.cached_tokens
check(cached == again.usage.prompt_tokens - 1, f"the repeated prompt reuses the cache ({cached} cached)")
check(again.choices[0].message.content == text, "the repeated greedy chat gives the same text")

chunks = list(client.chat.completions.create(
    model=model, messages=messages, max_tokens=8, stream=True, stream_options={"include_usage": True}, **greedy))
check(chunks[0].choices[0].delta.role == "assistant", "the first chunk carries the role")
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(streamed == text, "the streamed chat text equals the whole answer")
reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
check(reasons == ["length"], f"one chunk carries finish_reason ({reasons})")
check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8, "the last chunk is the usage chunk")
check(all(c.usage is None for c in chunks[:-1]), "no usage before the last chunk")

plain = list(client.chat.completions.create(model=model, messages=messages, max_tokens=3, stream=True, **greedy))
check(all(c.usage is None for c in plain), "no usage chunk without include_usage")

prompt = "The quick brown fox"
comp = client.completions.create(model=model, prompt=prompt, max_tokens=24, **greedy)
full = comp.choices[0].text
check(comp.object == "text_completion" and comp.choices[0].finish_reason == "length", "completion shape")
check(len(full) >= 6, f"the completion has text ({full!r})")
comp_chunks = list(client.completions.create(
    model=model, prompt=prompt, max_tokens=24, stream=True, stream_options={"include_usage": True}, **greedy))
check("".join(c.choices[0].text for c in comp_chunks if c.choices) == full, "the streamed completion equals the whole")
check(comp_chunks[-1].usage.completion_tokens == 24, "the completion stream ends with usage")

stop = full[len(full) // 2: len(full) // 2 + 2]
expected = full[: full.index(stop)]
stopped = client.completions.create(model=model, prompt=prompt, max_tokens=24, stop=[stop], **greedy)
check(stopped.choices[0].text == expected and stopped.choices[0].finish_reason == "stop",
      f"a stop string ({stop!r}) ends the text before it")
stopped_chunks = list(client.completions.create(model=model, prompt=prompt, max_tokens=24, stop=stop, stream=True, **greedy))
check("".join(c.choices[0].text for c in stopped_chunks) == expected, "a streamed stop string is never sent")

# Log-probabilities, parsed into the client's own types.
lp = client.chat.completions.create(model=model, messages=messages, max_tokens=6, logprobs=True, top_logprobs=3, **greedy)
content = lp.choices[0].logprobs.content
check(len(content) >= 1 and all(len(t.top_logprobs) == 3 for t in content), "chat logprobs: content with 3 top ones")
check(all(t.logprob <= 0 and t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
          for t in content), "chat logprobs: greedy picks the top token, every log-probability <= 0")
lp_chunks = list(client.chat.completions.create(
    model=model, messages=messages, max_tokens=6, logprobs=True, top_logprobs=3, stream=True, **greedy))
streamed_lp = [t for c in lp_chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
check(streamed_lp == content, "chat logprobs: the stream's chunks carry the whole answer's")
legacy = client.completions.create(model=model, prompt=prompt, max_tokens=6, logprobs=2, **greedy).choices[0].logprobs
check(len(legacy.tokens) == len(legacy.token_logprobs) == len(legacy.top_logprobs) == len(legacy.text_offset) >= 1,
      "completion logprobs: tokens, token_logprobs, top_logprobs, text_offset")
check(all(max(t.values()) == l for t, l in zip(legacy.top_logprobs, legacy.token_logprobs)),
      "completion logprobs: greedy's token is the most likely")

try:
    client.chat.completions.create(model=model, messages=messages, top_logprobs=2)
    check(False, "top_logprobs without logprobs is refused")
except openai.BadRequestError as e:
    check("top_logprobs" in e.message, "top_logprobs without logprobs is a BadRequestError naming it")

try:
    client.chat.completions.create(model=model, messages=messages, n=2)
    check(False, "n=2 is refused")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "n:" in e.message, "n=2 is a BadRequestError naming n")

try:
    client.completions.create(model=model, prompt=[1, 2, 999999])
    check(False, "an id past the vocabulary is refused")
except openai.BadRequestError as e:
    check("prompt[2]" in e.message, "an id past the vocabulary is a BadRequestError naming it")

try:
    client_wrong = openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0)
    client_wrong.completions.create(model=model, prompt="x", max_tokens=1)
    check(False, "a wrong key is refused")
except openai.AuthenticationError as e:
    check(e.status_code == 401, "a wrong key is an AuthenticationError")

print(f"{checks} checks passed")
