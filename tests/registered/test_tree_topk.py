"""Tree drafting on triton at two widths, one server each (checks in ``testing.rows.TreeRow``): EAGLE3 4 steps /
topk 8 / 32 draft tokens and 5 steps / topk 16 / 64 draft tokens, overlap on, page_size 1, forced retraction, strict
busy leak checks, concurrent abort. Stock falls back to spec v1 for explicit topk > 1; the plugin runs it on spec v2
tree drafting. The cases run one after another (one width alone: ``--tests TestTreeTopk8``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=400, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestTreeTopk8(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 4, 8, 32, 1.5


class TestTreeTopk16(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 5, 16, 64, 1.5


if __name__ == "__main__":
    unittest.main()
