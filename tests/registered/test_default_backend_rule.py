"""The default invocation on Hopper with no backend flag and fa3 trees off (SGLANG_SPECV2_FIXES_FA3_TREES=0; with
them on, the default, test_default_backend_rule_fa3.py): EAGLE3 with no step/topk/token flags and no
--attention-backend. SGLang 0.5.11 / 0.5.12.x choose the attention backend before the speculative params
(topk still unset): fa3 on Hopper; then topk 4 is auto-chosen and the unfinished spec-v2 tree path runs on
fa3 (stock: the device-side assert of test_default_spec_params, or no fa3 kernels at all in this repo's
device bundle). With the plugin and fa3 trees off, upstream's own default rule is applied again on the final topk
(fa3 only for topk 1 on Hopper): flashinfer, on spec v2 tree drafting; /server_info names backend and spec path.
Greedy output equals a flashinfer target-only server; concurrent load with retraction, a concurrent
abort and strict busy leak checks. Needs a Hopper GPU (elsewhere upstream's rule never picks fa3)."""

import unittest

from sglang_specv2_fixes.selection import ENV_FA3_TREES
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import DefaultInvocationRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestDefaultBackendRule(DefaultInvocationRow, CustomTestCase):
    BACKEND = "flashinfer"
    ENV = {ENV_FA3_TREES: "0"}


if __name__ == "__main__":
    unittest.main()
