"""Retract guard (no bug targeted) at page_size 256: EAGLE3 3/1/4 on spec v2, forced retraction, prompts of
300-700 tokens split by a chunked-prefill size of one page, mixed chunk requested (checks in
``testing.rows.RetractRow``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import RetractRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestRetractPage256(RetractRow, CustomTestCase):
    PAGE_SIZE, CHUNK, PROMPT_LEN = 256, 256, (300, 700)


if __name__ == "__main__":
    unittest.main()
