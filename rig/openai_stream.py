#!/usr/bin/env python3
"""Stream one chat or text completion with the `openai` client, as an application would.

The tests' own environment has no `openai` package; LiteLLM's environment has it (LiteLLM is
built on it), so tests run this file with that python (rig.litellm_process.litellm_python()).
The key comes from OPENAI_API_KEY, never the command line. It prints one JSON object: the
number of chunks, the text, the finish reason and the usage the stream ended with.

    OPENAI_API_KEY=... python rig/openai_stream.py BASE_URL MODEL chat|completions MAX_TOKENS
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import openai

    base_url, model, kind, max_tokens = argv[0], argv[1], argv[2], int(argv[3])
    client = openai.OpenAI(base_url=base_url, max_retries=0, timeout=120)
    common = {"model": model, "max_tokens": max_tokens, "stream": True,
              "stream_options": {"include_usage": True},
              "extra_body": {"min_tokens": max_tokens}}
    if kind == "chat":
        stream = client.chat.completions.create(
            messages=[{"role": "user", "content": "who answers?"}], **common)
    else:
        stream = client.completions.create(prompt="who answers?", **common)
    chunks, pieces, finish, usage = 0, [], None, None
    for chunk in stream:
        chunks += 1
        for choice in chunk.choices:
            piece = choice.delta.content if kind == "chat" else choice.text
            pieces.append(piece or "")
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    print(json.dumps({"chunks": chunks, "text": "".join(pieces), "finish_reason": finish,
                      "usage": usage}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
