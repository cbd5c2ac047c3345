"""The default invocation on Hopper with no backend flag: EAGLE3 with no step/topk/token flags and no
--attention-backend. SGLang 0.5.11 / 0.5.12.x choose the attention backend before the speculative params
(topk still unset): fa3 on Hopper; then topk 4 is auto-chosen and the unfinished spec-v2 tree path runs on
fa3 (stock: the device-side assert of test_default_spec_params, or no fa3 kernels at all in this repo's
device bundle). With the plugin, upstream's own default rule is applied again on the final topk (fa3 only
for topk 1 on Hopper): flashinfer, on spec v2 tree drafting; /server_info names backend and spec path.
Greedy output equals a flashinfer target-only server; concurrent load with retraction, a concurrent
abort and strict busy leak checks. Needs a Hopper GPU (elsewhere upstream's rule never picks fa3)."""

import unittest

from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.config import common_without_backend
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import eagle3_args, launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestDefaultBackendRule(SpecChecks, CustomTestCase):
    BACKEND_ARGS = ("--attention-backend", "flashinfer")  # the target-only reference

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(steps=None), env={"SGLANG_TEST_RETRACT": "1"},
                             common=common_without_backend())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_backend_and_spec_path(self):
        info = server_info()
        serving = specv2_state(info).get("serving") or {}
        print("serving:", serving, "attention_backend:", info.get("attention_backend"))
        self.assertEqual(info["attention_backend"], "flashinfer")
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
