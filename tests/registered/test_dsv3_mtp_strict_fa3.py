"""The strict MTP row (``testing.dsv3_rows.Dsv3MtpStrict``, test_dsv3_mtp_strict.py) on fa3 (``--attention-backend
fa3`` with an MLA target: SGLang's ``FlashAttentionBackend`` in its MLA mode): page size 1 without the radix cache,
page size 64 with it. fa3 is not in the device bundle: carry the release's own fa3 in parts (``ci/gpu/lease.sh
fa3-parts``, then its ``add`` / ``inst`` steps). Hopper only."""

import unittest

from sglang_specv2_fixes.testing.dsv3_rows import Dsv3MtpStrict
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang.test.test_utils import CustomTestCase

# bug_in: as test_dsv3_mtp_strict.py (scheduler and draft-graph code, not the backend's)
register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu",
                   bug_in="fix:skip-stale-overlap-updates|fix:draft-graph-eager-registry")


class TestDsv3MtpFa3Page1NoRadix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "fa3", 1, False


class TestDsv3MtpFa3Page64Radix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "fa3", 64, True


if __name__ == "__main__":
    unittest.main()
