#!/usr/bin/env python3
"""Writes a seed corpus for fuzz/http_request: raw HTTP requests built from the
requests the server's contract tests send (tests/server/test_server_api.cpp,
test_server_errors.cpp, test_server_http.cpp): every route, good and bad
bodies, then each wrapped in the transport variants a client may use
(Content-Length, chunked, Expect: 100-continue, keep-alive, HTTP/1.0, the
API key as Bearer / bearer / X-Api-Key, an Origin, a query string) plus
preflights and malformed heads. Stdlib only.

    python3 scripts/make_http_fuzz_seeds.py OUT_DIR
"""
import hashlib
import json
import os
import sys

KEY = "fuzz-key"  # fuzz/http_request.cpp's --api-key
MSGS = [{"role": "user", "content": "Hi"}]
LONG = "the dog and the cat " * 20

# (method, path, body) as in the contract tests.
REQUESTS = [
    ("GET", "/health", None), ("GET", "/v1/health", None), ("GET", "/v1/models", None), ("GET", "/models", None),
    ("GET", "/props", None), ("GET", "/metrics", None), ("GET", "/v1/nothing", None),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, "stream": True,
                                      "stream_options": {"include_usage": True}}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 3, "logprobs": True, "top_logprobs": 3}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, "temperature": 0.7, "top_p": 0.9,
                                      "top_k": 20, "min_p": 0.05, "seed": 7, "stop": ["\n", "cat"],
                                      "frequency_penalty": 0.5, "presence_penalty": 0.1,
                                      "logit_bias": {"5": -100}, "user": "x", "metadata": {}}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                                      "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": False}}),
    ("POST", "/chat/completions", {"messages": MSGS, "max_completion_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4}),
    ("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 4, "stream": True, "logprobs": 2}),
    ("POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": True}),
    ("POST", "/completions", {"prompt": ["Once", 5], "max_tokens": 2, "cache_prompt": False}),
    ("POST", "/completion", {"prompt": "Once", "n_predict": 3}),
    ("POST", "/completion", {"prompt": "Once", "n_predict": 3, "stream": True, "n_probs": 2}),
    ("POST", "/tokenize", {"content": "Hello world", "with_pieces": True, "add_special": True}),
    ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
    ("POST", "/apply-template", {"messages": MSGS}),
    # errors (test_server_errors.cpp)
    ("POST", "/v1/chat/completions", {"messages": "Hi"}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": "ten"}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "temperature": "hot"}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "stream": "yes"}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "stop": 5}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "seed": 1.5}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}),
    ("POST", "/v1/chat/completions", {"messages": []}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "n": 3}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "response_format": {"type": "json_schema"}}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "tools": [{"type": "function"}]}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "top_p": 7.0}),
    ("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 256}),
    ("POST", "/v1/completions", {"prompt": {}}),
    ("POST", "/v1/completions", {"prompt": LONG}),
    ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1000}),
    ("POST", "/v1/completions", {"prompt": "Hi", "echo": True}),
    ("POST", "/completion", {"prompt": [1, 2, 100000]}),
    ("POST", "/detokenize", {"tokens": [-1]}),
    ("POST", "/tokenize", {"content": 12}),
]
RAW_BODIES = [("POST", "/v1/chat/completions", '{"messages": ['), ("POST", "/completion", "not json"),
              ("POST", "/v1/completions", "[1,2]"), ("POST", "/tokenize", "")]


def head(method, path, version="1.1", extra=()):
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1"] + list(extra)
    return "\r\n".join(lines) + "\r\n"


def variants(method, path, body):
    auth = [f"Authorization: Bearer {KEY}"]
    if body is None:
        yield head(method, path, extra=auth) + "\r\n"
        yield head(method, path) + "\r\n"  # no key
        yield head(method, path + "?x=1", "1.0", [f"X-Api-Key: {KEY}"]) + "\r\n"
        yield head(method, path, extra=auth + ["Origin: http://example.com", "Connection: keep-alive"]) + "\r\n"
        return
    ct = ["Content-Type: application/json"]
    yield head(method, path, extra=auth + ct + [f"Content-Length: {len(body)}"]) + "\r\n" + body
    yield head(method, path, extra=[f"authorization: bearer {KEY}"] + ct + [f"Content-Length: {len(body)}"]) + "\r\n" + body
    chunks = "".join(f"{len(body[i:i + 16]):x}\r\n{body[i:i + 16]}\r\n" for i in range(0, len(body), 16))
    yield head(method, path, extra=auth + ct + ["Transfer-Encoding: chunked"]) + "\r\n" + chunks + "0\r\n\r\n"
    yield (head(method, path, extra=auth + ct + ["Expect: 100-continue", f"Content-Length: {len(body)}"]) + "\r\n" +
           body)
    yield head(method, path, extra=ct + [f"Content-Length: {len(body)}"]) + "\r\n" + body  # no key: 401


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = []
    for method, path, body in REQUESTS:
        seeds += variants(method, path, None if body is None else json.dumps(body))
    for method, path, body in RAW_BODIES:
        seeds += variants(method, path, body)
    seeds += [
        head("OPTIONS", "/v1/chat/completions", extra=["Origin: http://example.com",
                                                       "Access-Control-Request-Method: POST",
                                                       "Access-Control-Request-Headers: authorization"]) + "\r\n",
        head("POST", "/v1/completions", extra=["Content-Length: 100000000"]) + "\r\n",
        head("GET", "/health", extra=["X-Long: " + "a" * 2000]) + "\r\n",
        "HELLO THERE\r\n\r\n",
        "GET / HTTP/1.1\r\n",
        head("HEAD", "/health") + "\r\n",
        head("GET", "/health") + "\r\n" + head("GET", "/props") + "\r\n",  # pipelined
    ]
    for s in seeds:
        data = s.encode()
        with open(os.path.join(out, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main()
