"""Tree drafting on the flashinfer attention backend (the backend SGLang picks on Hopper for an explicit topk > 1,
and the one the plugin's routing picks for the default invocation) at two widths, one server each: EAGLE3 3 steps /
topk 4 / 8 draft tokens and 4 steps / topk 8 / 16 draft tokens, overlap on, page_size 1, forced retraction, strict
busy leak checks, greedy equal to a flashinfer target-only server, concurrent abort (checks in
``testing.rows.TreeRow``). Stock falls back to spec v1 for explicit topk > 1; the plugin runs it on spec v2 tree
drafting. The cases run one after another (one width alone: ``--tests TestTreeFlashinferTopk4``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class FlashinferTree(TreeRow):
    BACKEND_ARGS = ("--attention-backend", "flashinfer")


class TestTreeFlashinferTopk4(FlashinferTree, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 4, 8, 1.5


class TestTreeFlashinferTopk8(FlashinferTree, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 4, 8, 16, 1.5


if __name__ == "__main__":
    unittest.main()
