"""Default spec params: EAGLE3 with no step/topk/token flags (auto-chosen steps 5 / topk 4 / 8 tokens).

Stock 0.5.11 and 0.5.12.x keep the overlap scheduler on (spec v2) for that tree configuration without
a finished tree path: under concurrent load the scheduler dies on a device-side index-out-of-bounds
assert. With the plugin (tree-drafting) the same invocation serves on spec v2 tree drafting with
greedy output equal to a target-only server, decode logprobs equal to prefill re-scoring, forced
retraction, a concurrent abort and strict busy leak checks on.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=200, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestDefaultSpecParams(CustomTestCase, SpecChecks):
    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(steps=None), env={"SGLANG_TEST_RETRACT": "1"})

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_concurrent_load_survives(self):
        self.check_concurrent_load(32)
        self.check_concurrent_load(32)
        self.check_alive()

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()
        self.check_alive()

    def test_3_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_4_runs_spec_v2_tree(self):
        info = server_info()
        print("spec params:", info["speculative_num_steps"], info["speculative_eagle_topk"],
              info["speculative_num_draft_tokens"], "disable_overlap:", info["disable_overlap_schedule"])
        print("specv2_fixes:", {k: v["state"] for k, v in specv2_state(info)["fixes"].items()})
        self.assertGreater(info["speculative_eagle_topk"], 1)
        self.assertFalse(info["disable_overlap_schedule"])
        self.check_accept_length(1.5)

    def test_5_concurrent_abort(self):
        self.check_concurrent_abort()
        self.check_greedy_equals_target_only()
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
