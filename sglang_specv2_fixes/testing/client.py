"""HTTP client of the registered GPU tests: requests to the server under test (``server.URL``, or ``url=``), each
with a timeout, so a dead scheduler fails the test instead of hanging it."""

import concurrent.futures

import requests

from .config import prompts
from .server import TIMEOUT, URL


def generate(input_ids, max_new_tokens, url=None, **kw):
    """Greedy /generate of ``max_new_tokens`` tokens (EOS ignored); ``kw``: other top-level fields."""
    payload = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}}
    payload.update(kw)
    return post(payload, url)


def send(payload, url=None):
    """/generate with the body ``payload``: its chunks when it asks for a stream, else its JSON answer."""
    return stream_generate(payload, url=url) if payload.get("stream") else post(payload, url)


def post(payload, url=None):
    """/generate with the body ``payload`` (non-streaming): the JSON answer; an HTTP error raises."""
    r = requests.post((url or URL) + "/generate", json=payload, timeout=TIMEOUT)
    r.raise_for_status()
    return r.json()


def concurrent_generate(n, max_new_tokens_fn, seed=0, workers=32):
    ps = prompts(n, seed)
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(generate, p, max_new_tokens_fn(i)) for i, p in enumerate(ps)]
        return [f.result() for f in futs]


def server_info():
    return requests.get(URL + "/server_info", timeout=TIMEOUT).json()


def loads():
    """SGLang's own pool accounting per DP rank (``/v1/loads``, core metrics)."""
    r = requests.get(URL + "/v1/loads", params={"include": "core"}, timeout=TIMEOUT)
    r.raise_for_status()
    return r.json()["loads"]


def health_ok():
    try:
        return requests.get(URL + "/health", timeout=60).status_code == 200
    except requests.RequestException:
        return False


def specv2_state(info):
    """The scheduler's own view (DP rank 0) published by the plugin."""
    return info["internal_states"][0]["specv2_fixes"]


def rank_views(probe_dir):
    """{tp_rank: that scheduler rank's specv2_fixes view}, fresh: the files of ``SGLANG_SPECV2_FIXES_PROBE_DIR`` are
    cleared, then one /server_info query makes every TP rank write its own (only rank 0 answers the query)."""
    import glob
    import json
    import os

    for path in glob.glob(os.path.join(probe_dir, "probe-*.json")):
        os.unlink(path)
    server_info()
    views = {}
    for path in glob.glob(os.path.join(probe_dir, "probe-*.json")):
        with open(path) as f:
            view = json.load(f)
        views[view["rank"]["tp_rank"]] = view
    return views


def output_ids(response):
    return response["output_ids"]


def rescore_logprobs(input_ids, output_ids):
    """Prefill re-scoring: logprobs of ``output_ids`` given ``input_ids`` from one extend pass."""
    full = list(input_ids) + list(output_ids)
    payload = {"input_ids": full, "sampling_params": {"temperature": 0, "max_new_tokens": 1},
               "return_logprob": True, "logprob_start_len": len(input_ids) - 1}
    r = requests.post(URL + "/generate", json=payload, timeout=TIMEOUT)
    r.raise_for_status()
    lps = r.json()["meta_info"]["input_token_logprobs"]
    return [lp[0] for lp in lps[1:]]  # drop the logprob of the last prompt token itself


# ---- streaming sessions (test_streaming_sessions_*.py) ------------------------------------------------
# The HTTP API is the same in 0.5.11 and 0.5.12.x: /open_session {capacity_of_str_len, streaming} answers
# the session id; a turn is /generate with session_params {id, rid, offset, replace, drop_previous_output}
# (io_struct.SessionParams); /close_session {session_id}; /abort_request {rid}; /flush_cache?timeout=S.


def open_session(streaming=True, url=None):
    r = requests.post((url or URL) + "/open_session", json={"capacity_of_str_len": 50000, "streaming": streaming},
                      timeout=TIMEOUT)
    r.raise_for_status()
    sid = r.json()
    assert isinstance(sid, str) and sid, f"open_session answered {r.text!r}"
    return sid


def close_session(session_id, url=None):
    requests.post((url or URL) + "/close_session", json={"session_id": session_id}, timeout=TIMEOUT).raise_for_status()


def session_payload(session_id, input_ids, max_new_tokens, session=None, **kw):
    """/generate body of one greedy turn of a session; ``session`` adds session_params fields, ``kw`` top-level
    fields (rid, return_logprob, logprob_start_len, ...)."""
    payload = {"input_ids": input_ids, "session_params": {"id": session_id, **(session or {})},
               "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    payload.update(kw)
    return payload


def post_generate(payload, url=None):
    """The raw /generate response (a rejected request answers 400)."""
    return requests.post((url or URL) + "/generate", json=payload, timeout=TIMEOUT)


def stream_generate(payload, on_chunk=None, url=None):
    """/generate with stream=True: every data chunk goes to ``on_chunk`` as it arrives; returns all chunks."""
    import json

    chunks = []
    with requests.post((url or URL) + "/generate", json=dict(payload, stream=True), stream=True, timeout=TIMEOUT) as r:
        r.raise_for_status()
        for line in r.iter_lines(chunk_size=None):  # each event as it arrives
            if not line.startswith(b"data:"):
                continue
            data = line[len(b"data:"):].strip()
            if data == b"[DONE]":
                break
            chunks.append(json.loads(data))
            if on_chunk is not None:
                on_chunk(chunks[-1])
    return chunks


def abort_request(rid, url=None):
    requests.post((url or URL) + "/abort_request", json={"rid": rid}, timeout=TIMEOUT).raise_for_status()


def flush_cache(timeout_s=30, url=None):
    """Flush the radix cache once the server is idle (waits up to ``timeout_s``); True on success."""
    return requests.post((url or URL) + f"/flush_cache?timeout={timeout_s}", timeout=TIMEOUT).status_code == 200
