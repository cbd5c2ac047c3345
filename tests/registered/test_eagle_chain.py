"""Chain drafting (topk 1) with the EAGLE (v1 draft) model on both schedulers: spec v1
(`--disable-overlap-schedule`) and spec v2 (overlap), under forced retraction and strict busy checks.
No bug is targeted here (both stock and plugin must pass): the row guards against the plugin's
bodies changing topk-1 behaviour, which must stay byte-identical to upstream."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args
from sglang_specv2_fixes.testing.client import server_info
from sglang_specv2_fixes.testing.rows import ServerRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class _EagleChain(ServerRow):
    EXTRA = []

    @classmethod
    def launch_args(cls):
        return eagle3_args(3, 1, 4, algorithm="EAGLE", draft="eagle") + cls.EXTRA

    def test_1_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_2_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_3_concurrent_load_with_retract(self):
        self.check_concurrent_load(32)
        self.check_accept_length(1.5)
        self.check_alive()

    def test_4_scheduler_kind(self):
        self.assertEqual(server_info()["disable_overlap_schedule"], bool(self.EXTRA))


class TestEagleChainSpecV2(_EagleChain, CustomTestCase):
    EXTRA = []


class TestEagleChainSpecV1(_EagleChain, CustomTestCase):
    EXTRA = ["--disable-overlap-schedule"]


if __name__ == "__main__":
    unittest.main()
