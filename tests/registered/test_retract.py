"""Retract guard (no bug targeted) at two page sizes, one server each: EAGLE3 3/1/4 on spec v2, forced retraction,
mixed chunk requested (checks in ``testing.rows.RetractRow``); page_size 1 with prompts of 100-300 tokens split by a
chunked-prefill size of 64, and page_size 256 with prompts of 300-700 tokens split by a chunked-prefill size of one
page. The cases run one after another (one alone: ``--tests TestRetractPage256``)."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import RetractRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestRetractChunked(RetractRow, CustomTestCase):
    PAGE_SIZE, CHUNK, PROMPT_LEN = 1, 64, (100, 300)


class TestRetractPage256(RetractRow, CustomTestCase):
    PAGE_SIZE, CHUNK, PROMPT_LEN = 256, 256, (300, 700)


if __name__ == "__main__":
    unittest.main()
