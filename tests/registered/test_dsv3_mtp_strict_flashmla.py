"""The strict MTP row (``testing.dsv3_rows.Dsv3MtpStrict``, test_dsv3_mtp_strict.py) on FlashMLA (``--attention-backend
flashmla`` with an MLA target: SGLang's ``FlashMLABackend``; MTP chains only, it refuses topk > 1). FlashMLA runs at
page size 64 alone (ServerArgs turns any other page size into 64), so both servers run at 64: without the radix cache
and with it. FlashMLA is not in the device bundle: carry the release's own beside it (``ci/gpu/lease.sh flashmla``).
Hopper only. On 0.5.11 - 0.5.12.post1 stock's draft extend takes FlashMLA's verify branch (flashmla-spec-v2-draft-extend):
the first decode stops the scheduler."""

import unittest

from sglang_specv2_fixes.testing.dsv3_rows import Dsv3MtpStrict
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang.test.test_utils import CustomTestCase

# bug_in: as test_dsv3_mtp_strict.py (scheduler and draft-graph code), and FlashMLA's own draft extend (#24640)
register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu",
                   bug_in="fix:skip-stale-overlap-updates|fix:draft-graph-eager-registry"
                          "|fix:flashmla-spec-v2-draft-extend")


class TestDsv3MtpFlashmlaPage64NoRadix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "flashmla", 64, False


class TestDsv3MtpFlashmlaPage64Radix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "flashmla", 64, True


if __name__ == "__main__":
    unittest.main()
