"""Hybrid SWA pool under spec v2: tiny GPT-OSS (sliding + full layers, sinks, MoE) + tiny EAGLE3 draft.

GptOssForCausalLM is routed to SGLang's hybrid sliding-window KV pool on both releases
(configs/model_config.py ``is_hybrid_swa_model``: SWAKVPool, SWATokenToKVPoolAllocator, SWARadixCache, SWA
eviction in ``ScheduleBatch.maybe_evict_swa``), and server_args accepts EAGLE3 with it (overlap on =
spec v2, topk 1). The tiny model (testing/tiny_models/swa.py) has a 16-token window, so every request here outgrows
it and SWA eviction runs. Its greedy text is a known walk (``tiny_swa.walk``), so outputs are checked
exactly, not only against a target-only server.

setUpClass first runs the target-only (no spec) SWA server for the reference outputs, then starts the
spec-v2 server: a failure to start shows which of the two cannot run. Leak detection is SGLang's own:
strict busy checks (full and SWA pools, every scheduler iteration) and the idle checks (pool + tree
cache sanity) raise in the scheduler and kill the server, so "alive + /health 200" after each scenario
is the assertion. No bug is targeted (stock and plugin must both pass).

``SPECV2_SWA_MOE`` picks the MoE runner (default ``triton``: SGLang's fused MoE kernels; the other
bundle-compatible choice is ``triton_kernel``).
"""

import concurrent.futures
import json
import os
import random
import threading
import time
import unittest

import requests

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.config import MODELS_DIR, prompts
from sglang_specv2_fixes.testing.server import TIMEOUT, URL, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import concurrent_generate, generate, health_ok, rescore_logprobs, server_info
from sglang_specv2_fixes.testing.reference import prefetch_reference, reference_outputs
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang.test.test_utils import CustomTestCase

from sglang_specv2_fixes.testing.tiny_models import llama_ref
from sglang_specv2_fixes.testing.tiny_models import swa as tiny_swa

register_specv2_ci(est_time=360, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")

MOE = os.environ.get("SPECV2_SWA_MOE", "triton")
SWA_ARGS = ["--moe-runner-backend", MOE, "--disable-piecewise-cuda-graph"]
REF_N, REF_TOKENS = 16, 48


def post(path, payload, timeout=TIMEOUT):
    return requests.post(URL + path, json=payload, timeout=timeout)


def body(r):
    try:
        return r.json()
    except ValueError:
        return {"status": r.status_code, "text": r.text[:300]}


def is_abort(out):
    fr = (out.get("meta_info") or {}).get("finish_reason") or {}
    return (isinstance(fr, dict) and fr.get("type") == "abort") or "abort" in json.dumps(out).lower()


def gen_payload(ids, n, **kw):
    p = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    p.update(kw)
    return p


def open_session(capacity=50000):
    r = post("/open_session", {"capacity_of_str_len": capacity, "streaming": True})
    assert r.status_code == 200, r.text
    return r.json()


def close_session(sid):
    return post("/close_session", {"session_id": sid})


def rand_ids(rng, n):
    return [rng.randrange(16, 1000) for _ in range(n)]


class TestSWASpecV2(CustomTestCase, SpecChecks):
    @classmethod
    def setUpClass(cls):
        cls.process = None
        cls.model = tiny_swa.build(MODELS_DIR)
        cls.ref_prompts = prompts(REF_N, seed=7)
        t0 = time.time()
        prefetch_reference(cls.ref_prompts, REF_TOKENS, target=cls.model, extra_args=SWA_ARGS)  # starts alongside
        cls.process = launch(eagle3_args(3, 1, 4) + SWA_ARGS + ["--enable-streaming-session",
                                                                 "--max-running-requests", "32"],
                             env={"SGLANG_TEST_RETRACT": "1"}, target=cls.model)
        cls.ref = reference_outputs(cls.ref_prompts, REF_TOKENS, target=cls.model, extra_args=SWA_ARGS)
        print(f"[swa] server under test and target-only SWA reference ready in {time.time() - t0:.0f}s", flush=True)

    @classmethod
    def tearDownClass(cls):
        stop(getattr(cls, "process", None))

    def assert_alive(self, settle=3.0):
        time.sleep(settle)  # the scheduler goes idle: its idle leak / tree-cache checks run now
        self.assertIsNone(self.process.poll(), "server exited (a strict memory check fails the scheduler)")
        self.assertTrue(health_ok(), "/health is not 200 (scheduler dead?)")

    # ---------------------------------------------------------------------------------------------
    def test_0_setup_is_hybrid_swa_spec_v2(self):
        info = server_info()
        st = info["internal_states"][0]
        print("[swa] server:", {k: info.get(k) for k in ("attention_backend", "moe_runner_backend",
              "disable_overlap_schedule", "disable_hybrid_swa_memory", "swa_full_tokens_ratio",
              "speculative_algorithm", "page_size", "max_running_requests")}, "memory:", st.get("memory_usage"))
        self.assertFalse(info["disable_hybrid_swa_memory"])
        self.assertFalse(info["disable_overlap_schedule"], "EAGLE3 fell back to spec v1")
        self.assertEqual(info["speculative_algorithm"], "EAGLE3")

    def test_1_target_only_reference_is_the_walk(self):
        for i, (p, r) in enumerate(zip(self.ref_prompts, self.ref)):
            self.assertEqual(r, tiny_swa.walk(p[-1], REF_TOKENS), f"prompt {i}: target-only SWA server off the walk")

    def test_2_greedy_equals_target_only(self):
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda p: generate(p, REF_TOKENS)["output_ids"], self.ref_prompts))
        for i, (g, r) in enumerate(zip(got, self.ref)):
            self.assertEqual(g, r, f"prompt {i}: spec v2 greedy output differs from target-only")

    def test_3_decode_logprobs_match_prefill_and_cpu_reference(self):
        self.check_decode_logprobs_match_prefill()
        W = llama_ref.load(self.model)
        worst = 0.0
        for p in prompts(4, seed=13, lo=20, hi=120):
            out = generate(p, 40, return_logprob=True)
            self.assertEqual(out["output_ids"], tiny_swa.walk(p[-1], 40))
            dec = [lp[0] for lp in out["meta_info"]["output_token_logprobs"]]
            ref = tiny_swa.logprobs(W, p, out["output_ids"])
            worst = max(worst, max(abs(a - b) for a, b in zip(dec, ref)))
        print(f"[swa] max |server - CPU fp32 reference| output logprob: {worst:.4f}")
        self.assertLess(worst, 0.2, "server logprobs far from the CPU reference (weights, window or sinks)")

    def test_4_concurrent_load_with_retract(self):
        outs = self.check_concurrent_load(32)
        ps = prompts(32, seed=3)
        for i, (p, o) in enumerate(zip(ps, outs)):
            self.assertEqual(o["output_ids"], tiny_swa.walk(p[-1], 4 + (i * 13) % 90), f"request {i}")
        self.check_accept_length(2.0)
        self.assert_alive()

    def test_5_abort_in_flight_no_leak(self):
        results = {}

        def run(key, payload):
            try:
                results[key] = body(post("/generate", payload))
            except requests.RequestException as e:
                results[key] = {"_exception": repr(e)}

        # (a) long decodes aborted by rid, then abort_all
        long_ps = prompts(12, seed=21, lo=20, hi=400)
        ths = [threading.Thread(target=run, args=(f"long{i}", gen_payload(p, 3500, rid=f"swa-long-{i}-{os.getpid()}")))
               for i, p in enumerate(long_ps)]
        for t in ths:
            t.start()
        time.sleep(0.8)
        for i in range(0, 12, 3):
            self.assertEqual(post("/abort_request", {"rid": f"swa-long-{i}-{os.getpid()}"}).status_code, 200)
        time.sleep(0.3)
        self.assertEqual(post("/abort_request", {"rid": "", "abort_all": True}).status_code, 200)
        for t in ths:
            t.join(TIMEOUT)
        # (b) a burst aborted while queued / prefilling (longer prompts, chunked)
        burst = prompts(16, seed=22, lo=200, hi=1500)
        ths = [threading.Thread(target=run, args=(f"burst{i}", gen_payload(p, 200))) for i, p in enumerate(burst)]
        for t in ths:
            t.start()
        time.sleep(0.05)
        self.assertEqual(post("/abort_request", {"rid": "", "abort_all": True}).status_code, 200)
        for t in ths:
            t.join(TIMEOUT)
        # (c) streaming clients that disconnect mid-decode
        for i, p in enumerate(prompts(4, seed=23, lo=20, hi=100)):
            with requests.post(URL + "/generate", json=gen_payload(p, 3000, stream=True), stream=True,
                               timeout=TIMEOUT) as r:
                for k, _ in enumerate(r.iter_lines()):
                    if k >= 6:
                        break
        aborted = sorted(k for k, v in results.items() if is_abort(v))
        finished = {k: (v.get("meta_info") or {}).get("completion_tokens") for k, v in results.items() if not is_abort(v)}
        print(f"[swa] aborted {len(aborted)}/{len(results)}: {aborted}; finished normally: {finished}")
        self.assertGreater(sum(k.startswith("long") for k in aborted), 0, "no in-flight decode was aborted")
        for k, v in results.items():  # client-side failures (timeouts, dropped connections); server errors are printed
            self.assertNotIn("_exception", v, f"{k}: {v}")
        # the server keeps serving correctly, then goes idle without a leak report
        for p in prompts(4, seed=24):
            self.assertEqual(generate(p, 32)["output_ids"], tiny_swa.walk(p[-1], 32))
        self.assert_alive()

    def test_6_streaming_session_kv_inheritance(self):
        rng = random.Random(31)
        post("/flush_cache", {})
        sid = open_session()
        try:
            rid, prev_total, full, gen = None, 0, [], 24
            for turn, ids in enumerate([rand_ids(rng, 21), rand_ids(rng, 12), rand_ids(rng, 30)]):
                r = post("/generate", gen_payload(ids, gen, session_params={"id": sid, "rid": rid}, return_logprob=True))
                self.assertEqual(r.status_code, 200, r.text)
                out = r.json()
                meta = out["meta_info"]
                rid = meta["id"]
                print(f"[swa] session turn {turn}: prompt {meta['prompt_tokens']} cached {meta['cached_tokens']} "
                      f"completion {meta['completion_tokens']}")
                self.assertEqual(meta["prompt_tokens"], prev_total + len(ids), f"turn {turn}: session context")
                if turn > 0:  # spec v2 (overlap): the whole previous turn is inherited KV (offset 0)
                    self.assertEqual(meta["cached_tokens"], prev_total, f"turn {turn}: inherited KV")
                self.assertEqual(out["output_ids"], tiny_swa.walk(ids[-1], gen), f"turn {turn}: output")
                full += ids + out["output_ids"]
                prev_total = meta["prompt_tokens"] + meta["completion_tokens"]
            # the last turn decoded on inherited (partly SWA-evicted) KV: same logprobs as one fresh prefill
            dec = [lp[0] for lp in meta["output_token_logprobs"]]
            pre = rescore_logprobs(full[:-gen], full[-gen:])
            diff = max(abs(a - b) for a, b in zip(dec, pre))
            print(f"[swa] session last turn: decode vs prefill max logprob diff {diff:.4f}")
            self.assertLess(diff, 0.1)
        finally:
            self.assertEqual(close_session(sid).status_code, 200)
        self.assert_alive()

    def test_7_streaming_session_abort_recovery(self):
        rng = random.Random(32)
        sid = open_session()
        try:
            ids1 = rand_ids(rng, 18)
            r1 = post("/generate", gen_payload(ids1, 16, session_params={"id": sid, "rid": None}))
            self.assertEqual(r1.status_code, 200, r1.text)
            m1 = r1.json()["meta_info"]
            turn1_total = m1["prompt_tokens"] + m1["completion_tokens"]
            res = {}

            def long_turn():
                res["r"] = body(post("/generate", gen_payload(rand_ids(rng, 10), 3000,
                                                              session_params={"id": sid, "rid": None})))

            t = threading.Thread(target=long_turn)
            t.start()
            time.sleep(0.5)
            self.assertEqual(post("/abort_request", {"rid": "", "abort_all": True}).status_code, 200)
            t.join(TIMEOUT)
            print("[swa] aborted session turn:", {k: v for k, v in (res["r"].get("meta_info") or {}).items()
                                                  if k in ("finish_reason", "prompt_tokens", "completion_tokens")})
            self.assertTrue(is_abort(res["r"]), f"turn 2 was not aborted: {str(res['r'])[:300]}")
            ids3 = rand_ids(rng, 9)
            for _ in range(20):
                r3 = post("/generate", gen_payload(ids3, 8, session_params={"id": sid, "rid": None}))
                if r3.status_code == 200:
                    break
                time.sleep(0.5)
            self.assertEqual(r3.status_code, 200, r3.text)
            out3 = r3.json()
            self.assertEqual(out3["meta_info"]["prompt_tokens"], turn1_total + len(ids3),
                             "after the aborted turn the session must roll back to turn 1")
            self.assertEqual(out3["output_ids"], tiny_swa.walk(ids3[-1], 8))
        finally:
            self.assertEqual(close_session(sid).status_code, 200)
        self.assert_alive()

    def test_8_concurrent_sessions_with_retract(self):
        """8 streaming sessions x 4 turns next to plain requests, under forced retraction."""
        errors = []

        def session_worker(k):
            rng = random.Random(100 + k)
            sid = open_session()
            try:
                prev_total = 0
                for turn in range(4):
                    ids, n = rand_ids(rng, rng.randrange(5, 40)), rng.randrange(8, 40)
                    out = body(post("/generate", gen_payload(ids, n, session_params={"id": sid, "rid": None})))
                    meta = out.get("meta_info") or {}
                    if meta.get("prompt_tokens") != prev_total + len(ids) or out.get("output_ids") != tiny_swa.walk(ids[-1], n):
                        errors.append(f"session {k} turn {turn}: prompt {meta.get('prompt_tokens')} expected "
                                      f"{prev_total + len(ids)}; output ok={out.get('output_ids') == tiny_swa.walk(ids[-1], n)}; {str(out)[:200]}")
                        return
                    prev_total = meta["prompt_tokens"] + meta["completion_tokens"]
            finally:
                close_session(sid)

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            futs = [ex.submit(session_worker, k) for k in range(8)]
            plain = ex.submit(concurrent_generate, 24, lambda i: 10 + (i * 11) % 60, 5, 8)
            for f in futs:
                f.result()
            outs = plain.result()
        for i, (p, o) in enumerate(zip(prompts(24, seed=5), outs)):
            self.assertEqual(o["output_ids"], tiny_swa.walk(p[-1], 10 + (i * 11) % 60), f"plain request {i}")
        self.assertEqual(errors, [])
        self.assert_alive()

    def test_9_still_healthy_after_idle(self):
        self.assert_alive(settle=5.0)


if __name__ == "__main__":
    unittest.main()
