"""The suite on both cores: on a machine without a CUDA GPU a plain `python3 -m pytest` runs whole
test files in worker processes (pytest-xdist; tests/conftest.py, "Both cores"), and one process
wherever that would be wrong or wasted (a GPU to time on, --part, single tests, a nested pytest)."""

import os
import subprocess
import sys
from types import SimpleNamespace

import conftest
import pytest
from conftest import CPU_FILE_SECONDS, ROOT, WORKERS_ENV, auto_workers, file_order_key, suite_files, usable_cpus
from test_worker_env import EXPECT_THREADS_ENV


class _Plugins:
    def __init__(self, xdist: bool):
        self.xdist = xdist

    def hasplugin(self, name: str) -> bool:
        return name == "xdist" and self.xdist


def fake_config(args=(), numprocesses=None, xdist=True, **options):
    """What auto_workers reads of a pytest Config: args, -n, the plugins, and getoption."""
    opts = {"part": None, "gpu_only": False, "collectonly": False, "usepdb": False, **options}
    option = SimpleNamespace(numprocesses=numprocesses) if xdist else SimpleNamespace()  # xdist adds -n
    return SimpleNamespace(args=list(args), option=option, pluginmanager=_Plugins(xdist),
                           getoption=lambda name, default=None: opts.get(name, default))


@pytest.mark.parametrize("config, environ, cuda, workers", [
    (fake_config(["tests"]), {}, False, min(usable_cpus(), conftest.MAX_AUTO_WORKERS)),
    (fake_config(["tests"]), {WORKERS_ENV: "3"}, False, 3),
    (fake_config(["tests"]), {WORKERS_ENV: "1"}, False, 0),
    (fake_config(["tests"]), {WORKERS_ENV: "0"}, False, 0),
    (fake_config(["tests"]), {}, True, 0),
    (fake_config(["tests"], numprocesses=0), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests"], xdist=False), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests"]), {"PYTEST_XDIST_WORKER": "gw0", WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests"], part="1/2"), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests"], gpu_only=True), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests"], collectonly=True), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests/test_ab.py::test_x"]), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests/test_ab.py"]), {WORKERS_ENV: "3"}, False, 0),
    (fake_config(["tests/test_ab.py", "tests/test_bundle.py"]), {WORKERS_ENV: "2"}, False, 2),
], ids=["default", "env-3", "env-1", "env-0", "cuda", "n-0-given", "no-xdist", "nested-pytest", "part",
        "gpu-only", "collect-only", "single-test", "one-file", "two-files"])
def test_workers_only_where_they_help(config, environ, cuda, workers):
    n, why = auto_workers(config, environ, cuda)
    assert n == (workers if workers > 1 else 0), why
    assert why


def test_a_bad_worker_count_is_one_usage_error_naming_the_variable():
    with pytest.raises(pytest.UsageError, match=f"{WORKERS_ENV}='two': expected a whole number"):
        auto_workers(fake_config(["tests"]), {WORKERS_ENV: "two"}, False)


def test_files_go_out_heaviest_first_and_the_weights_name_real_files():
    files = suite_files()
    assert set(CPU_FILE_SECONDS) <= set(files), set(CPU_FILE_SECONDS) - set(files)
    order = sorted(files, key=file_order_key)
    heaviest = max(CPU_FILE_SECONDS, key=CPU_FILE_SECONDS.get)
    assert order[0] == heaviest
    weights = [-file_order_key(f) for f in order]
    assert weights == sorted(weights, reverse=True)


def two_files_in_a_fresh_pytest(*options: str) -> subprocess.CompletedProcess:
    """Two small test files of the suite in a pytest of their own, as a plain run starts it (not as
    a nested one: no xdist worker named in its environment), NVFP4_TEST_WORKERS=2; it must pass."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", conftest.THREADS_ENV)}
    env[WORKERS_ENV] = "2"
    env[EXPECT_THREADS_ENV] = "1"  # tests/test_worker_env.py checks what reaches a worker (without workers: skipped)
    files = ["tests/test_worker_env.py", "tests/test_isolation.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options, *files], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_a_plain_run_uses_the_workers_and_passes():
    """Two small test files through the real hook and pytest-xdist: the run says it has two
    workers, and every test passes there as it does in one process."""
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (the dev extra installs it)")
    if conftest.HAS_CUDA:
        pytest.skip("with a CUDA GPU the suite keeps one process (its tests time kernels)")
    proc = two_files_in_a_fresh_pytest()
    assert "2 workers [" in proc.stdout and "2 worker processes, whole test files each" in proc.stdout, proc.stdout
    assert " passed" in proc.stdout.splitlines()[-1] and "failed" not in proc.stdout.splitlines()[-1]
    assert "skipped" not in proc.stdout.splitlines()[-1], proc.stdout  # test_worker_env.py ran in a worker


def test_workers_compute_on_one_thread_each_unless_the_user_says_otherwise():
    """A run with workers gives each (and what it starts) one compute thread; a value set is kept."""
    assert conftest.worker_threads_env({}) == {"OMP_NUM_THREADS": "1"}
    assert conftest.worker_threads_env({"OMP_NUM_THREADS": " "}) == {"OMP_NUM_THREADS": "1"}
    assert conftest.worker_threads_env({"OMP_NUM_THREADS": "2"}) == {}


def test_without_xdist_the_suite_runs_in_one_process():
    """-p no:xdist stands in for a machine without pytest-xdist: no -n option exists there, and
    the hook leaves the run to the one process."""
    proc = two_files_in_a_fresh_pytest("-p", "no:xdist")
    assert "workers [" not in proc.stdout and "worker processes" not in proc.stdout, proc.stdout
