"""Finish-line cases of the differential rows: /generate bodies whose stop strings, stop tokens, regex stops and
``max_new_tokens`` fall at chosen offsets of the tiny target's greedy output, and the comparison of what a client
receives from a speculative server with what the same target answers without speculation (the oracle).

The tiny Llama's greedy output is known in advance (``tiny_models.llama``: a walk whose next token depends on
the last token only), so the cases are built before any server starts: offsets 1..40 put each stop inside, at the
start and at the end of accepted runs of every length. Standard library only, apart from the model's plan.
"""

from __future__ import annotations

import random
from typing import Dict, List, Tuple

FIELDS = ("text", "output_ids", "finish_reason", "completion_tokens")  # what a client receives, compared per case
OUTPUT_LEN = 64  # the predicted greedy output per prompt; every case stops within it


def walk(prompt: List[int], n: int = OUTPUT_LEN) -> List[int]:
    """The tiny target's greedy continuation of ``prompt`` (``tiny_models.llama.plan``): next = walk[nxt[slot]]."""
    from .tiny_models import llama

    _, walk_ids, _, nxt, slot = llama.plan()
    out, last = [], prompt[-1]
    for _ in range(n):
        last = int(walk_ids[nxt[slot[last]]])
        out.append(last)
    return out


def text_of(ids: List[int]) -> str:
    """The tiny tokenizer's decode: ``t{id}`` joined with spaces (walk tokens are never special)."""
    from .tiny_models import llama

    return " ".join(llama.tok_name(i) for i in ids)


def _body(prompt, max_new_tokens, stream=False, **sampling):
    return {"input_ids": prompt, "stream": stream,
            "sampling_params": dict(temperature=0, max_new_tokens=max_new_tokens, ignore_eos=False, **sampling)}


def cases(prompts: List[List[int]], seed: int = 0) -> List[Tuple[str, dict]]:
    """(label, /generate body) per case: per prompt a spread of offsets ``k`` (different per prompt, so that
    over the prompts every position of an accepted run is hit) and every kind of finish at ``k``."""
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(prompts):
        w = walk(p)
        tok = lambda k: text_of([w[k]])  # noqa: E731
        for j, k in enumerate(sorted(rng.sample(range(1, 41), 4))):
            kind = (i + j) % 4  # rotate the less common kinds over prompts and offsets
            tag = f"p{i} k{k}"
            out += [
                (f"{tag} stop string", _body(p, OUTPUT_LEN, stop=[tok(k)])),
                (f"{tag} stop string over two tokens", _body(p, OUTPUT_LEN, stop=[f"{tok(k)[1:]} {tok(k + 1)[:2]}"])),
                (f"{tag} stop token, cap after it", _body(p, k + 3, stop_token_ids=[w[k]])),
                (f"{tag} stop token, cap at it", _body(p, k + 1, stop_token_ids=[w[k]])),
                (f"{tag} stop token, cap before it", _body(p, k, stop_token_ids=[w[k]])),
                (f"{tag} stop string, cap after it", _body(p, k + 2, stop=[tok(k)])),
                (f"{tag} max_new_tokens", _body(p, k)),
            ]
            if kind == 0:
                out += [(f"{tag} stop string then stop token", _body(p, OUTPUT_LEN, stop=[tok(k)],
                                                                     stop_token_ids=[w[k + 1]])),
                        (f"{tag} stop token then stop string", _body(p, OUTPUT_LEN, stop=[tok(k + 1)],
                                                                     stop_token_ids=[w[k]]))]
            elif kind == 1:
                out += [(f"{tag} regex stop", _body(p, OUTPUT_LEN, stop_regex=[rf"{tok(k)} t\d+"])),
                        (f"{tag} regex before a stop string", _body(p, OUTPUT_LEN, stop=[tok(k + 2)],
                                                                   stop_regex=[rf"{tok(k)} t\d+"]))]
            elif kind == 2:
                out += [(f"{tag} stop token untrimmed", _body(p, OUTPUT_LEN, stop_token_ids=[w[k]], no_stop_trim=True)),
                        (f"{tag} stop string untrimmed", _body(p, OUTPUT_LEN, stop=[tok(k)], no_stop_trim=True))]
            else:
                out += [(f"{tag} stop string, streamed", _body(p, OUTPUT_LEN, stream=True, stop=[tok(k)])),
                        (f"{tag} stop token near the cap, streamed", _body(p, k + 2, stream=True,
                                                                           stop_token_ids=[w[k]]))]
    return out


def min_tokens_cases(prompts: List[List[int]], seed: int = 0) -> List[Tuple[str, dict, int]]:
    """(label, /generate body, k) per case of the min_tokens row: per prompt a stop token ``w[k]`` (first seen at
    ``k``: the walk has no token twice) at four offsets, ``min_tokens`` at, just below and well below ``k`` (the oracle
    stops at ``k``), just above and well above it (it cannot stop at ``k``), every third offset streamed, and a
    control without ``min_tokens``."""
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(prompts):
        w = walk(p)
        for j, k in enumerate(sorted(rng.sample(range(3, 41), 4))):
            stream = (i + j) % 3 == 0
            for label, m in (("at", k), ("just below", k - 1), ("well below", max(1, k // 2)),
                             ("just above", k + 1), ("well above", k + 6)):
                out.append((f"p{i} k{k} min_tokens {label} ({m}){', streamed' if stream else ''}",
                            _body(p, OUTPUT_LEN, stream=stream, stop_token_ids=[w[k]], min_new_tokens=m), k))
            out.append((f"p{i} k{k} no min_tokens", _body(p, OUTPUT_LEN, stop_token_ids=[w[k]]), k))
    return out


def received(response) -> Dict[str, object]:
    """What the client received: text, output ids, finish reason and completion tokens of a /generate answer (a
    streamed answer: its chunks, of which the last one counts, checked by ``stream_problems``)."""
    last = response[-1] if isinstance(response, list) else response
    meta = last["meta_info"]
    return dict(text=last["text"], output_ids=last.get("output_ids"), finish_reason=meta.get("finish_reason"),
                completion_tokens=meta.get("completion_tokens"))


def stream_problems(chunks) -> List[str]:
    """A streamed answer may not take back text: every chunk's text is a prefix of the final text (a stop string
    streamed before the trim shows here)."""
    if not isinstance(chunks, list):
        return []
    final = chunks[-1]["text"]
    return [f"chunk {n} text {c['text']!r} is not a prefix of the final text {final!r}"
            for n, c in enumerate(chunks) if not final.startswith(c["text"])]


def differences(got, want: Dict[str, object]) -> List[str]:
    """The received fields of the answer ``got`` that differ from the oracle's (``want``: ``received`` of its
    answer), and any text a stream took back."""
    g = received(got)
    return [f"{f}: {g[f]!r} != oracle {want[f]!r}" for f in FIELDS if g[f] != want[f]] + stream_problems(got)


def differing(labelled, want, workers: int = 16, compare=differences) -> Tuple[int, List[str]]:
    """Send each ``(label, body)`` of ``labelled`` to the server under test (``workers`` at once) and compare its answer
    with the oracle's (``want``: the target-only answers as ``compare`` reads them, ``received`` for ``differences``,
    in the same order): (answers received, ``"label: differences"`` for each answer that differs)."""
    import concurrent.futures

    from .client import send

    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        got = list(ex.map(lambda lb: send(lb[1]), labelled))
    return len(got), [f"{label}: {'; '.join(d)}" for (label, _), g, w in zip(labelled, got, want)
                      for d in [compare(g, w)] if d]
