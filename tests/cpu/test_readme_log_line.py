"""The README's sample log line is the line the plugin logs on sglang 0.5.11 (issue 56, finding 6).

A fresh interpreter loads the plugin through SGLang's own ``load_plugins()`` on 0.5.11's real objects, imports what a
scheduler process has imported by then (the scheduler and the spec-v2 worker) and logs the scheduler's line; the
README's block (one line in the log, wrapped there) must equal it with the pid and the plugin's path masked.
Regenerate the README block after a change with ``python tests/cpu/test_readme_log_line.py`` on 0.5.11.
"""

import os
import re
import sys

import pytest
from conftest import OPT_IN_SWITCHES, ROOT, VERSION, run_py

README = os.path.join(ROOT, "README.md")
RELEASE = "0.5.11"
PID, PATH = re.compile(r"pid=\d+"), re.compile(r"from [^\]\s]+\]")

LOG_LINE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang.srt.managers.scheduler, sglang.srt.speculative.eagle_worker_v2  # what a scheduler has imported
from sglang_specv2_fixes import plugin
plugin.announce('scheduler')
"""


def masked(text):
    return PATH.sub("from PLUGIN]", PID.sub("pid=PID", " ".join(text.split())))


def readme_block():
    """The README's sample line: the fenced block under 'In the server log' that starts with '[scheduler]'."""
    text = open(README, encoding="utf-8").read()
    m = re.search(r"```\n\s*(\[scheduler\] sglang-specv2-fixes .*?)```", text, re.S)
    assert m, "README.md has no fenced block starting with '[scheduler] sglang-specv2-fixes'"
    return m.group(1)


def logged_line():
    # what a user's server logs: the opt-in fixes' switches unset (conftest turns them on for the other tests)
    p = run_py(LOG_LINE, SGLANG_SPECV2_FIXES="auto", **dict.fromkeys(OPT_IN_SWITCHES, ""))
    assert p.returncode == 0, p.stderr[-4000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[scheduler] sglang-specv2-fixes ")]
    assert len(lines) == 1, p.stdout[-4000:]
    return lines[0]


@pytest.mark.skipif(VERSION != RELEASE, reason=f"the README's sample line is the {RELEASE} one")
def test_readme_sample_line_is_what_0_5_11_logs():
    line = logged_line()
    assert "pid=" in line and " from " in line  # what the masks stand for is there
    assert masked(readme_block()) == masked(line), line


if __name__ == "__main__":  # print the line, wrapped as the README shows it
    import textwrap

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(textwrap.fill(logged_line(), 117, initial_indent="   ", subsequent_indent="   ", break_on_hyphens=False,
                        break_long_words=False))
