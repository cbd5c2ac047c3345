"""Spec v2 MTP on a DeepSeek-V3-class target (issue 58), strict checks on triton: the family's base is
``sglang_specv2_fixes.testing.dsv3_rows.Dsv3MtpStrict`` (the model, its invocation, the checks); its other backends
are test_dsv3_mtp_strict_flashinfer.py, test_dsv3_mtp_strict_fa3.py and test_dsv3_mtp_strict_flashmla.py, DP
attention test_dp2_dsv3_mtp.py. Two servers: page size 1 with the radix cache off, page size 64 with it on. A
combination a release refuses at startup must be listed in ``dsv3_rows.REFUSED`` (test_0 shows the refusal is clear).

``bug_in``: where ``skip-stale-overlap-updates`` or ``draft-graph-eager-registry`` is patched (see the registration);
elsewhere both sides are expected to pass until a bug on these paths is shown on this model.
"""

import unittest

from sglang_specv2_fixes.testing.dsv3_rows import Dsv3MtpStrict
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang.test.test_utils import CustomTestCase

# bug_in: on stock the probe sees a finished or retracted request's KV counters moved by a late overlap result (#23456,
# ``skip-stale-overlap-updates``): scheduler code, not the model's, so it fails where that fix is patched. On 0.5.13.x
# stock dies of a CUDA illegal memory access at the first request after /flush_cache (test_9): the draft graph replays
# into the eager input registry freed when it grew (``draft-graph-eager-registry``; with that fix alone the row passes)
register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu",
                   bug_in="fix:skip-stale-overlap-updates|fix:draft-graph-eager-registry")


class TestDsv3MtpTritonPage1NoRadix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "triton", 1, False


class TestDsv3MtpTritonPage64Radix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "triton", 64, True


if __name__ == "__main__":
    unittest.main()
