"""Shared helpers for the registered GPU tests: launch the real ``sglang.launch_server`` with the tiny
real-weight models, A/B mode from ``SPECV2_AB`` (off|auto), talk to it over HTTP."""

import concurrent.futures
import os
import sys

import requests

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("datasets") is None:
    sys.path.append(os.path.join(HERE, "_shims"))

from sglang.srt.utils import kill_process_tree  # noqa: E402
from sglang.test.test_utils import DEFAULT_URL_FOR_TEST, popen_launch_server  # noqa: E402

import tiny_models  # noqa: E402

# runs of one file in parallel (stock and plugin) use different ports: SPECV2_PORT from the runner
PORT = int(os.environ.get("SPECV2_PORT", DEFAULT_URL_FOR_TEST.rsplit(":", 1)[1]))
URL = f"http://127.0.0.1:{PORT}"
REF_URL = f"http://127.0.0.1:{PORT + 500}"  # target-only reference server
TIMEOUT = 90  # per HTTP request: a dead scheduler must fail the test, not hang it
AB = os.environ.get("SPECV2_AB", "auto")
MODELS_DIR = os.environ.get("SPECV2_MODELS", "/tmp/specv2-tiny-models")
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--cuda-graph-max-bs", "8", "--mem-fraction-static", os.environ.get("SPECV2_MEM_FRACTION", "0.2"), "--log-level", "info",
]


def models():
    return tiny_models.build_all(MODELS_DIR)


def eagle3_args(steps=3, topk=1, tokens=4, algorithm="EAGLE3", draft="eagle3"):
    m = models()
    args = ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", m[draft]]
    if steps is not None:
        args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                 "--speculative-num-draft-tokens", str(tokens)]
    return args


def launch(extra_args, env=None, target=None):
    """Start the server under test (``target``: a model dir, default the tiny Llama target)."""
    m = models()
    full_env = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}
    full_env.update(env or {})
    # the A/B switch goes through the plugin's own CLI flag on `sglang serve` (popen_launch_server's command)
    return popen_launch_server(target or m["target"], URL, timeout=600, other_args=COMMON + extra_args + ["--specv2-fixes", AB],
                               env=full_env)


def stop(process):
    if process is not None:
        kill_process_tree(process.pid)


def generate(input_ids, max_new_tokens, url=None, **kw):
    payload = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}}
    payload.update(kw)
    r = requests.post((url or URL) + "/generate", json=payload, timeout=TIMEOUT)
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
    return requests.get(URL + "/server_info", timeout=TIMEOUT).json()


def health_ok():
    try:
        return requests.get(URL + "/health", timeout=60).status_code == 200
    except requests.RequestException:
        return False


def specv2_state(info):
    """The scheduler's own view (DP rank 0) published by the plugin."""
    return info["internal_states"][0]["specv2_fixes"]


def reference_outputs(ps, max_new_tokens, target=None, extra_args=()):
    """Greedy output ids of a target-only server for prompts ``ps`` (cached on disk per machine, so the
    rows of one run share a single target-only launch)."""
    import hashlib
    import json

    import fcntl

    target = target or models()["target"]
    import sglang

    # per release: each release's rows compare against that release's own target-only output
    key = hashlib.sha256(json.dumps([ps, max_new_tokens, target, list(extra_args), sglang.__version__]).encode()).hexdigest()[:16]
    path = os.path.join(MODELS_DIR, f"reference-{key}.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the stock and plugin runs share one reference launch
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return _launch_reference(ps, max_new_tokens, path, target, list(extra_args))


def _launch_reference(ps, max_new_tokens, path, target, extra_args):
    import json
    proc = popen_launch_server(target, REF_URL, timeout=600, other_args=COMMON + extra_args + ["--specv2-fixes", "off"])
    try:
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            outs = list(ex.map(lambda p: generate(p, max_new_tokens, url=REF_URL)["output_ids"], ps))
    finally:
        stop(proc)
    with open(path + f".{os.getpid()}", "w") as f:
        json.dump(outs, f)
    os.replace(path + f".{os.getpid()}", path)
    return outs


def rescore_logprobs(input_ids, output_ids):
    """Prefill re-scoring: logprobs of ``output_ids`` given ``input_ids`` from one extend pass."""
    full = list(input_ids) + list(output_ids)
    payload = {"input_ids": full, "sampling_params": {"temperature": 0, "max_new_tokens": 1},
               "return_logprob": True, "logprob_start_len": len(input_ids) - 1}
    r = requests.post(URL + "/generate", json=payload, timeout=TIMEOUT)
    r.raise_for_status()
    lps = r.json()["meta_info"]["input_token_logprobs"]
    return [lp[0] for lp in lps[1:]]  # drop the logprob of the last prompt token itself


class SpecChecks:
    """Assertions shared by the speculative rows (mixin for CustomTestCase)."""

    N_REF, REF_TOKENS = 16, 48

    def check_greedy_equals_target_only(self):
        ps = prompts(self.N_REF, seed=7)
        ref = reference_outputs(ps, self.REF_TOKENS)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda p: generate(p, self.REF_TOKENS)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i}: speculative greedy output differs from target-only")

    def check_decode_logprobs_match_prefill(self, n=6, tokens=40, tol=0.1):
        for p in prompts(n, seed=11):
            out = generate(p, tokens, return_logprob=True)
            dec = [lp[0] for lp in out["meta_info"]["output_token_logprobs"]]
            pre = rescore_logprobs(p, out["output_ids"])
            self.assertEqual(len(dec), len(pre))
            diff = max(abs(a - b) for a, b in zip(dec, pre))
            self.assertLess(diff, tol, f"decode vs prefill logprob max diff {diff}")

    def check_concurrent_load(self, n=32):
        outs = concurrent_generate(n, lambda i: 4 + (i * 13) % 90, seed=3)
        for i, o in enumerate(outs):
            self.assertEqual(o["meta_info"]["completion_tokens"], 4 + (i * 13) % 90)
        return outs

    def check_accept_length(self, minimum):
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        self.assertIsNotNone(accept)
        self.assertGreater(accept, minimum)

    def check_alive(self):
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())
