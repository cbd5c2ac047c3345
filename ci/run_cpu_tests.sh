#!/usr/bin/env bash
# CPU test suite (what CI runs): builds/reuses the CPU environment, then runs pytest once per supported
# SGLang release with that release's real Python source on PYTHONPATH.
#
#   bash ci/run_cpu_tests.sh            # all releases
#   SPECV2_RELEASES=0.5.11 bash ci/run_cpu_tests.sh -k stale   # one release, extra pytest args
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${SPECV2_VENV:-$ROOT/.venv-cpu}
RELEASES=${SPECV2_RELEASES:-"0.5.11 0.5.12.post1"}
cd "$ROOT"
mkdir -p build
SPECV2_RELEASES="$RELEASES" bash ci/setup_cpu_env.sh "$VENV"
rc=0
for v in $RELEASES; do
  echo "=== sglang $v: pytest tests/cpu ==="
  PYTHONPATH="$VENV/releases/$v" "$VENV/bin/python" -m pytest -p no:cacheprovider -W ignore::UserWarning -W ignore::DeprecationWarning \
    --junitxml="$ROOT/build/junit-$v.xml" "$@" tests/cpu || rc=$?
  # pytest exit 5 (no tests collected) is a failure here
done
exit $rc
