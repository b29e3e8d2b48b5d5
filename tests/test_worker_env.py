"""What a run with worker processes gives its workers (tests/conftest.py, "Both cores"): checked
only inside a worker of a pytest that tests/test_workers.py starts for it; skipped elsewhere."""

import os
import subprocess
import sys

import pytest

EXPECT_THREADS_ENV = "KIT_TEST_EXPECT_THREADS"  # set by test_workers.py's fresh pytest, which unsets OMP_NUM_THREADS


@pytest.mark.skipif(not (os.environ.get(EXPECT_THREADS_ENV) and os.environ.get("PYTEST_XDIST_WORKER")),
                    reason="checked in a worker of the pytest test_workers.py starts")
def test_a_worker_and_what_it_starts_compute_on_one_thread():
    assert os.environ.get("OMP_NUM_THREADS") == "1"
    code = "import os; print(os.environ.get('OMP_NUM_THREADS'))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout == "1\n"
