"""The default invocation on Hopper (EAGLE3 with no step/topk/token flags and no --attention-backend) with fa3 trees
on (the default since this row and the fa3 tree rows met on 0.5.11 / 0.5.12 / 0.5.12.post1 with
SGLANG_SPECV2_FIXES_FA3_TREES=1; the row sets nothing now): the plugin keeps the
fa3 that 0.5.11 / 0.5.12.x choose before topk is known, as upstream 0.5.13 - 0.5.17 keep it (0.5.17 on Hopper:
fa3, steps 5 / topk 4 / 8 draft tokens, spec v2), and runs the auto-chosen tree on spec v2 tree drafting.
Greedy output equals an fa3 target-only server; concurrent load with retraction, a concurrent abort and strict busy
leak checks. Stock runs the unfinished spec-v2 tree path on fa3 (test_default_spec_params.py's device-side assert).
fa3 is not in the device bundle: carry it in parts (``ci/gpu/lease.sh fa3-parts``, then ``add`` / ``inst``).
Hopper only."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import DefaultInvocationRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestDefaultBackendRuleFa3(DefaultInvocationRow, CustomTestCase):
    BACKEND = "fa3"


if __name__ == "__main__":
    unittest.main()
