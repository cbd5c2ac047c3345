"""Tree drafting on fa3 (fa3 trees: on by default, SGLANG_SPECV2_FIXES_FA3_TREES=0 turns them off) at two widths,
one server each: EAGLE3 3 steps / topk 4 / 8 draft tokens and 4 steps / topk 8 / 16 draft tokens on an explicit
``--attention-backend fa3``, overlap on, page_size 1, forced retraction, strict busy leak checks, greedy equal to an
fa3 target-only server, decode logprobs equal to the prefill's, a concurrent abort (``testing.rows.TreeRow``). fa3
runs a topk > 1 target verify as cascade attention (a shared prefix, then the tree under its mask: 8 or 16 tokens)
and the tree's draft extend eagerly (its tree-width graph metadata is ported for triton and flashinfer only). Stock
falls back to spec v1 for explicit topk > 1; the plugin with the switch off too (and says why). Upstream 0.5.13 -
0.5.17 run the default invocation's tree on fa3. fa3 is not in the device bundle: carry the release's own fa3 in
parts (``ci/gpu/lease.sh fa3-parts``, then ``add`` / ``inst``). Hopper only. The cases run one after another (one
width alone: ``--tests TestTreeFa3Topk4``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class Fa3Tree(TreeRow):
    BACKEND_ARGS = ("--attention-backend", "fa3")


class TestTreeFa3Topk4(Fa3Tree, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 4, 8, 1.5


class TestTreeFa3Topk8(Fa3Tree, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 4, 8, 16, 1.5


if __name__ == "__main__":
    unittest.main()
