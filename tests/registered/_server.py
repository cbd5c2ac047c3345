"""Shared helpers for the registered GPU tests: launch the real ``sglang.launch_server`` with the tiny
real-weight models, A/B mode from ``SPECV2_AB`` (off|auto), talk to it over HTTP."""

import concurrent.futures
import os
import sys

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from sglang.srt.utils import kill_process_tree  # noqa: E402
from sglang.test.test_utils import DEFAULT_URL_FOR_TEST, popen_launch_server  # noqa: E402

import tiny_models  # noqa: E402

URL = DEFAULT_URL_FOR_TEST
AB = os.environ.get("SPECV2_AB", "auto")
MODELS_DIR = os.environ.get("SPECV2_MODELS", "/tmp/specv2-tiny-models")
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--cuda-graph-max-bs", "8", "--mem-fraction-static", "0.3", "--log-level", "info",
]


def models():
    return tiny_models.build_all(MODELS_DIR)


def eagle3_args(steps=3, topk=1, tokens=4):
    m = models()
    args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", m["eagle3"]]
    if steps is not None:
        args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                 "--speculative-num-draft-tokens", str(tokens)]
    return args


def launch(extra_args, env=None):
    m = models()
    full_env = {"SGLANG_SPECV2_FIXES": AB, "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}
    full_env.update(env or {})
    return popen_launch_server(m["target"], URL, timeout=600, other_args=COMMON + extra_args, env=full_env)


def stop(process):
    if process is not None:
        kill_process_tree(process.pid)


def generate(input_ids, max_new_tokens, **kw):
    payload = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}}
    payload.update(kw)
    r = requests.post(URL + "/generate", json=payload, timeout=300)
    r.raise_for_status()
    return r.json()


def prompts(n, seed=0, lo=8, hi=64, vocab=1000):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(16, vocab) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def concurrent_generate(n, max_new_tokens_fn, seed=0, workers=32):
    ps = prompts(n, seed)
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(generate, p, max_new_tokens_fn(i)) for i, p in enumerate(ps)]
        return [f.result() for f in futs]


def server_info():
    return requests.get(URL + "/server_info", timeout=60).json()


def health_ok():
    try:
        return requests.get(URL + "/health", timeout=60).status_code == 200
    except requests.RequestException:
        return False


def specv2_state(info):
    """The scheduler's own view (DP rank 0) published by the plugin."""
    return info["internal_states"][0]["specv2_fixes"]
