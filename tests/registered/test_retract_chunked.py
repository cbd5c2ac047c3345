"""Retract guard (no bug targeted): EAGLE3 3/1/4 on spec v2, page_size 1, forced retraction, prompts of
100-300 tokens split by a chunked-prefill size of 64, mixed chunk requested (checks in
``testing.rows.RetractRow``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import RetractRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=150, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestRetractChunked(RetractRow, CustomTestCase):
    PAGE_SIZE, CHUNK, PROMPT_LEN = 1, 64, (100, 300)


if __name__ == "__main__":
    unittest.main()
