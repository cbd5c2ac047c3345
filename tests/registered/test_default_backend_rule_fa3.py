"""The default invocation on Hopper (EAGLE3 with no step/topk/token flags and no --attention-backend) with fa3 trees
on (SGLANG_SPECV2_FIXES_FA3_TREES=1, opt-in until this row and test_tree_fa3_topk4.py have met): the plugin keeps the
fa3 that 0.5.11 / 0.5.12.x choose before topk is known, as upstream 0.5.13 - 0.5.17 keep it (0.5.17 on an H200,
2026-11-29: fa3, steps 5 / topk 4 / 8 draft tokens, spec v2), and runs the auto-chosen tree on spec v2 tree drafting.
Greedy output equals an fa3 target-only server; concurrent load with retraction, a concurrent abort and strict busy
leak checks. Stock runs the unfinished spec-v2 tree path on fa3 (test_default_spec_params.py's device-side assert).
fa3 is not in the device bundle: carry it in parts (``ci/make_fa3_parts.sh``, ``ci/gpu_fa3.sh``). Hopper only."""

import unittest

from sglang_specv2_fixes.selection import ENV_FA3_TREES
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_without_backend
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestDefaultBackendRuleFa3(SpecChecks, CustomTestCase):
    BACKEND_ARGS = ("--attention-backend", "fa3")  # the target-only reference

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(steps=None), env={"SGLANG_TEST_RETRACT": "1", ENV_FA3_TREES: "1"},
                             common=common_without_backend())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_backend_and_spec_path(self):
        info = server_info()
        serving = specv2_state(info).get("serving") or {}
        print("serving:", serving, "attention_backend:", info.get("attention_backend"))
        self.assertEqual(info["attention_backend"], "fa3")
        self.assertEqual(serving.get("spec_path"), "v2 tree")
        self.assertGreater(info["speculative_eagle_topk"], 1)

    def test_2_concurrent_load_survives(self):
        self.check_concurrent_load(32)
        self.check_concurrent_load(32)
        self.check_alive()

    def test_3_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_4_concurrent_abort(self):
        self.check_concurrent_abort()
        self.check_greedy_equals_target_only()
        self.check_alive()


if __name__ == "__main__":
    unittest.main()
