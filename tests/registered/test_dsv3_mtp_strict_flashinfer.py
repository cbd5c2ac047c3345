"""The strict MTP row (``testing.dsv3_rows.Dsv3MtpStrict``, test_dsv3_mtp_strict.py) on the flashinfer MLA backend
(``--attention-backend flashinfer`` with an MLA target: SGLang's ``FlashInferMLAAttnBackend``): page size 1 without
the radix cache, page size 64 with it. flashinfer travels in the device bundle (fi.tar.xz)."""

import unittest

from sglang_specv2_fixes.testing.dsv3_rows import Dsv3MtpStrict
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang.test.test_utils import CustomTestCase

# bug_in: as the triton row's (test_dsv3_mtp_strict.py): a late overlap result moves a finished request's KV counters
# where ``skip-stale-overlap-updates`` is patched; on 0.5.13.x the first request after /flush_cache dies of a CUDA
# illegal memory access on this backend too (``draft-graph-eager-registry``)
register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu",
                   bug_in="fix:skip-stale-overlap-updates|fix:draft-graph-eager-registry")


class TestDsv3MtpFlashinferPage1NoRadix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "flashinfer", 1, False


class TestDsv3MtpFlashinferPage64Radix(Dsv3MtpStrict, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "flashinfer", 64, True


if __name__ == "__main__":
    unittest.main()
