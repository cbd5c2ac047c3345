"""Tree drafting at width: EAGLE3 topk 16, 64 draft tokens, overlap on, page_size 1, with forced
retraction, strict busy leak checks and a concurrent abort. Stock falls back to spec v1 for explicit topk > 1 (overlap off,
asserted below); the plugin runs it on spec v2 tree drafting with output equal to target-only."""

import unittest

from _registry import register_specv2_ci
from _server import AB, SpecChecks, eagle3_args, launch, server_info, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=200, suite="specv2-gpu", releases=["0.5.11", "0.5.12.post1"],
                   bug_in=["0.5.11", "0.5.12.post1"])


class TestTreeTopk16(CustomTestCase, SpecChecks):
    @classmethod
    def setUpClass(cls):
        cls.process = launch(eagle3_args(steps=5, topk=16, tokens=64) + ["--page-size", "1"],
                             env={"SGLANG_TEST_RETRACT": "1"})

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_spec_v2_tree_is_used(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], "topk 16 fell back to spec v1 (overlap disabled)")

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_3_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_4_concurrent_load_with_retract(self):
        self.check_concurrent_load(32)
        self.check_accept_length(1.5)
        self.check_alive()

    def test_5_concurrent_abort(self):
        self.check_concurrent_abort()
        self.check_greedy_equals_target_only()
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
