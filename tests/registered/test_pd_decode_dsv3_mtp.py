"""PD disaggregation with MTP on the DeepSeek-V3-class target (issue 58, run with the 2-GPU rows): a prefill server on
GPU 0 and a decode server on GPU 1 (``--disaggregation-mode prefill`` / ``decode``, transfer backend
``SPECV2_PD_TRANSFER``, default mooncake), both with the default DeepSeek MTP invocation (``--speculative-algorithm
EAGLE``: the prefill side hands the decode side the target's last hidden state for the NextN draft), triton, page size
``SPECV2_PD_PAGE`` (default 64). No router: each request goes to both servers at once with one ``bootstrap_room``, as
SGLang's load balancers send it, and the client reads the decode server's answer.

Checks: spec v2 on the decode side; greedy output of 32 concurrent requests = the TP 1 non-speculative server's (the
oracle) = the model's walk; decode logprobs within 0.1 of the oracle's; regex-constrained requests end as the regex says;
the decode side's acceptance is the MTP layer's (> 2.5; the MTP layer drafts wrong from a hidden state of another
position); client aborts on the decode side; idle: the decode side's
``/v1/loads`` ``num_used_tokens`` 0 and the probe's committed-over-allocated counters 0; both servers alive."""

import concurrent.futures
import os
import random
import time
import unittest

from sglang_specv2_fixes.testing import server as srv
from sglang_specv2_fixes.testing.client import health_ok, post, server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_with_grammar, prompts
from sglang_specv2_fixes.testing.finish_line import walk
from sglang_specv2_fixes.testing.reference import prefetch_reference, reference_outputs, reference_responses
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import MODELS_DIR, URL, launch, stop
from sglang_specv2_fixes.testing.tiny_models import deepseek_v3
from sglang.test.test_utils import CustomTestCase, popen_launch_server

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu", gpus=2)

TRANSFER = os.environ.get("SPECV2_PD_TRANSFER", "mooncake")
PAGE = int(os.environ.get("SPECV2_PD_PAGE", "64"))
PORT = int(URL.rsplit(":", 1)[1])
PREFILL_URL = f"http://127.0.0.1:{PORT + 2}"  # inside the runner's 40-port slot (reference + 500, nccl + 20 / + 22)
BOOTSTRAP_PORT = PORT + 30
EOS, N, TOKENS = 2, 32, 40


def model():
    return deepseek_v3.build(MODELS_DIR)


def pd_generate(body):
    """One request through both servers (a load balancer's job): the decode server's answer."""
    body = dict(body, bootstrap_host="127.0.0.1", bootstrap_port=BOOTSTRAP_PORT,
                bootstrap_room=random.getrandbits(62))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        pre = ex.submit(post, body, PREFILL_URL)
        dec = ex.submit(post, body)
        out = dec.result()
        pre.result()
    return out


def output_logprobs(response):
    return [lp[0] for lp in response["meta_info"]["output_token_logprobs"]]


def greedy_body(p, n, **kw):
    return dict({"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}, **kw)


class TestPdDecodeDsv3Mtp(CustomTestCase):
    ORACLE = ("--attention-backend", "triton", "--page-size", str(PAGE))

    @classmethod
    def setUpClass(cls):
        cls.prefill = None
        prefetch_reference(prompts(N, seed=7), TOKENS, target=model(), extra_args=cls.ORACLE)
        pd = ["--disaggregation-transfer-backend", TRANSFER, "--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT),
              "--speculative-algorithm", "EAGLE", "--page-size", str(PAGE), "--max-running-requests", "32"]
        cls.prefill = popen_launch_server(
            model(), PREFILL_URL, timeout=600, env={"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"},
            other_args=common_with_grammar() + srv.nccl_args(PREFILL_URL) + pd
            + ["--disaggregation-mode", "prefill", "--base-gpu-id", "0", "--specv2-fixes", srv.AB])
        cls.process = launch(pd + ["--disaggregation-mode", "decode", "--base-gpu-id", "1"], target=model(),
                             env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
                             common=common_with_grammar())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)
        stop(cls.prefill)

    def test_1_config(self):
        info = server_info()
        self.assertEqual(info["disaggregation_mode"], "decode")
        self.assertEqual(info["disaggregation_transfer_backend"], TRANSFER)
        self.assertFalse(info["disable_overlap_schedule"], "spec v2 (overlap) expected on the decode side")
        self.assertEqual((info["speculative_algorithm"], info["speculative_num_steps"]), ("EAGLE", 3))
        self.assertEqual(info["page_size"], PAGE)

    def test_2_greedy_equals_target_only(self):
        ps = prompts(N, seed=7)
        ref = reference_outputs(ps, TOKENS, target=model(), extra_args=self.ORACLE)
        with concurrent.futures.ThreadPoolExecutor(N) as ex:
            got = list(ex.map(lambda p: pd_generate(greedy_body(p, TOKENS)), ps))
        for i, (p, g, r) in enumerate(zip(ps, got, ref)):
            self.assertEqual(r, walk(p)[:TOKENS], f"prompt {i}: the oracle is not the model's walk")
            self.assertEqual(g["output_ids"], r, f"prompt {i}: PD decode with MTP differs from target-only")
            self.assertEqual(g["meta_info"]["completion_tokens"], TOKENS)
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print(f"PD decode ({TRANSFER}, page {PAGE}) avg_spec_accept_length: {accept}", flush=True)
        self.assertIsNotNone(accept)
        self.assertGreater(accept, 2.5)

    def test_3_logprobs_equal_target_only(self):
        bodies = [greedy_body(p, 24, return_logprob=True) for p in prompts(6, seed=11)]
        want = reference_responses(bodies, target=model(), extra_args=self.ORACLE, keep=output_logprobs)
        for i, b in enumerate(bodies):
            got = [lp[0] for lp in pd_generate(b)["meta_info"]["output_token_logprobs"]]
            self.assertEqual(len(got), len(want[i]))
            diff = max(abs(a - c) for a, c in zip(got, want[i]))
            self.assertLess(diff, 0.1, f"prompt {i}: PD decode logprobs differ from target-only by {diff}")

    def test_4_regex_requests(self):
        ps = prompts(16, seed=17)
        cases = [(p, 1 + i % 6) for i, p in enumerate(ps)]
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            outs = list(ex.map(lambda c: pd_generate({"input_ids": c[0], "sampling_params": {
                "temperature": 0, "max_new_tokens": 16, "regex": f"(t[0-9]+){{{c[1]}}}"}}), cases))
        def ends_right(p, k, o):  # K words then the grammar's EOS (which may be trimmed from the ids)
            ids, reason = o["output_ids"], o["meta_info"]["finish_reason"]
            return (ids[:-1] if ids[-1:] == [EOS] else ids) == walk(p)[:k] and reason.get("matched") == EOS

        wrong = [f"case {i}: {o['output_ids']} {o['meta_info']['finish_reason']}" for i, ((p, k), o) in
                 enumerate(zip(cases, outs)) if not ends_right(p, k, o)]
        self.assertEqual(wrong, [])

    def test_5_abort_then_idle(self):
        import threading

        import requests

        ps = prompts(8, seed=5)
        threads = [threading.Thread(target=lambda p=p: self._swallow(lambda: pd_generate(greedy_body(p, 2000))),
                                    daemon=True) for p in ps]
        for t in threads:
            t.start()
        time.sleep(3)
        requests.post(URL + "/abort_request", json={"abort_all": True}, timeout=srv.TIMEOUT).raise_for_status()
        for t in threads:
            t.join(srv.TIMEOUT)
        deadline = time.time() + 60
        while True:
            r = requests.get(URL + "/v1/loads", params={"include": "core"}, timeout=srv.TIMEOUT).json()["loads"]
            if all(x["num_running_reqs"] == 0 and x["num_waiting_reqs"] == 0 for x in r):
                break
            self.assertLess(time.time(), deadline, f"the decode server did not go idle: {r}")
            time.sleep(0.5)
        time.sleep(3)
        r = requests.get(URL + "/v1/loads", params={"include": "core"}, timeout=srv.TIMEOUT).json()["loads"]
        probe = specv2_state(server_info())["probe"]
        print(f"PD decode idle: used={[x['num_used_tokens'] for x in r]} probe="
              f"{ {k: v for k, v in probe.items() if k != 'examples'} }", flush=True)
        for x in r:
            self.assertEqual(x["num_used_tokens"], 0, f"KV neither free nor evictable when idle: {x}")
        self.assertEqual(probe["committed_over_allocated"], 0, probe.get("examples"))
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())
        self.assertIsNone(self.prefill.poll(), "the prefill server died")

    @staticmethod
    def _swallow(fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 - an aborted request may answer an HTTP error
            pass


if __name__ == "__main__":
    unittest.main()
