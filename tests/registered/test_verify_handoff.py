"""The spec-v2 decode preparation without the host wait on the previous verify (verify-handoff, #25879; upstream
0.5.13): EAGLE3 chain 3 steps / topk 1 / 4 tokens on **triton** with CUDA graphs, overlap on, page size 1,
the fix's default (on; it met A/B with SGLANG_SPECV2_FIXES_VERIFY_HANDOFF=1 set, before it was), forced retraction
(SGLANG_TEST_RETRACT), the probe on, the harness's strict idle / busy memory checks. With the handoff, greedy output
must equal the same target served without speculation, decode logprobs must equal the prefill's (logprob batches
take the synchronous path: the switch between the two paths is exercised), 32 concurrent requests must end at
their lengths, aborts mid-decode must leave the server healthy and its memory clean, the walk model's draft must keep
its acceptance (wrong draft-extend positions write wrong draft KV: acceptance drops while the text stays right), and
the probe must count no host wait on a verify (``verify_host_waits``) during a logprob-free chain load. Stock waits
on the host at every steady decode step: it fails only the last test. Met A/B on 0.5.11, 0.5.12 and 0.5.12.post1
(2026-11-27, 2 x H200, docs/gpu-runs/2026-11-27-s23/: stock 229 host waits in the chain load, the plugin 0)."""

import unittest

from sglang_specv2_fixes.selection import ENV_PROBE
from sglang_specv2_fixes.testing.client import concurrent_generate, server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:verify-handoff&gpu", bug_in="fix:verify-handoff&gpu")

STEPS, TOPK, TOKENS = 3, 1, 4


class TestVerifyHandoff(SpecChecks, CustomTestCase):
    BACKEND_ARGS = ("--attention-backend", "triton")

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(STEPS, TOPK, TOKENS) + list(cls.BACKEND_ARGS),
                             env={"SGLANG_TEST_RETRACT": "1", ENV_PROBE: "1"})

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_2_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_3_concurrent_load(self):
        self.check_concurrent_load(32)

    def test_4_concurrent_abort(self):
        self.check_concurrent_abort()

    def test_5_acceptance_kept(self):
        self.check_accept_length(2.0)

    def test_6_alive(self):
        self.check_alive()

    def test_7_no_host_wait_on_verify(self):
        before = specv2_state(server_info())["probe"]["verify_host_waits"]
        outs = concurrent_generate(16, lambda i: 64 + 8 * i, seed=3)
        for i, o in enumerate(outs):
            self.assertEqual(o["meta_info"]["completion_tokens"], 64 + 8 * i)
        probe = specv2_state(server_info())["probe"]
        print("verify_host_waits:", before, "->", probe["verify_host_waits"], "spec_v2_results:", probe["spec_v2_results"])
        self.assertGreater(probe["spec_v2_results"], 0)
        self.assertEqual(probe["verify_host_waits"] - before, 0,
                         "the chain's decode preparation still waited on the host for a verify")


if __name__ == "__main__":
    unittest.main()
