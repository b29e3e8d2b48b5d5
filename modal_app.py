"""Time an nvfp4_gemv submission on a cloud B200 (Modal), under the kit's harness, the
server's own harness, KernelBot's evaluation, or several in one container; or run the kit's own
checks there.

    modal setup                                  # once: stores a Modal token
    modal run modal_app.py --submission submission.py --mode all --runs 3
    modal run modal_app.py --harness both        # the kit's eval.py and the server's, same GPU
    modal run modal_app.py --harness kit+kernelbot   # the kit's eval.py and KernelBot's run_config
    modal run modal_app.py --job all             # the test suite, the kernel benchmark, a config sweep

The GPU function lays out a harness's four files (eval.py, task.py, utils.py, reference.py)
and the submission renamed submission.py in a temporary directory and runs ``python eval.py
MODE FILE`` there with ``POPCORN_FD`` the write end of an ``os.pipe()`` -- test, then
benchmark, then leaderboard, each only if the previous one passed -- on the official shapes
of shapes.json. Harness ``kit``: this repository's files (plus harness.py, nvfp4.py and quant.py, which its
eval.py and reference.py import). Harness ``server``: the literal files
of gpu-mode/reference-kernels at the commit of ``--harness-date`` (``SERVER_COMMITS``,
``SERVER_SOURCES``), fetched by git when
the Modal image is built (never stored in this repository); the build records the full commit
hash it resolved, and every result carries it. Harness ``kernelbot``: KernelBot's own task
construction and evaluation of the server's task, as popcorn-cli's ``submit --local`` runs them
(``libkernelbot.task.make_task_definition``, ``build_task_config``,
``libkernelbot.run_eval.run_config``), with gpu-mode/kernelbot at ``KERNELBOT_COMMIT`` and the
task at the server commit the kit mirrors, both fetched by the image build (``kernelbot_evaluate``;
where that runner resolves ``main`` at each run, this one is pinned). The function returns the
parsed ``key: value`` lines; the local side prints the same tables for every harness (eval.py's
formatter) and writes a JSON file (default under benchmarks/results/).

Jobs (``--job``; the default, ``eval``, is the above): ``check`` runs the whole test suite
(``python3 -m pytest``) on the GPU and returns its junit summary and failures; ``bench`` runs
``benchmarks/bench_kernel.py`` and returns its JSON and Markdown; ``sweep`` runs it with
``--sweep`` and returns every backend's configs ranked (``benchmarks/apply_table.py`` writes the
winners into submission.py's table); ``all`` runs the three in turn, one container each, each
reported even if an earlier one failed. They run in a copy of the checkout in ``JOB_DIR`` (the
kit's files, tests/, benchmarks/) and write JSON and Markdown under benchmarks/results/, named
by step, GPU model and date, with the driver, torch and triton versions and the checkout's git
revision ("-dirty": tracked files changed).

Options: see ``OPTION_HELP`` (``modal run modal_app.py --help`` prints it). Arguments are
checked when `modal run` loads this module, before Modal is contacted, then the files a job sends
against the server's upload rules and, where KernelGuard is installed here, its pre-check, then
Modal itself (a token, the network): what stops the run
is one line, exit 2. ``--image`` picks the container image (``IMAGES``: the leaderboard-era pins,
or kernelbot's runner image now); only that one is defined, and every result records it.

The bodies of the GPU functions are ``evaluate`` and ``job_step``, plain Python that runs
anywhere (the tests run them on CPU: test mode with stand-in server files and a stand-in
KernelBot package; a small suite; a stand-in bench script). Modal bills the container per second
while it runs.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.metadata
import inspect
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Literal

try:
    import modal
except ImportError:
    if __name__ == "__main__":
        print("error: the modal package is not installed here: python3 -m pip install -e \".[modal]\" "
              "(then `modal setup` once, and `modal run modal_app.py`)", file=sys.stderr)
        raise SystemExit(2) from None
    raise

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import harness as kit_harness  # noqa: E402  (imports without torch: tables, popcorn client)

# ----------------------------------------------------------------------------- settings
# Every pin lives here (docs/modal.md says why these).
APP_NAME = "nvfp4-gemv-kit"
DEFAULT_GPU = "B200"
TIMEOUT_S = 3600  # one call: test + N x benchmark + N x leaderboard, with image start
CUDA_IMAGE = "nvidia/cuda:13.0.1-devel-ubuntu24.04"  # devel: nvcc for inline CUDA submissions
PYTHON_VERSION = "3.12"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cu130"  # the official runner's index
TORCH_PACKAGES = ("torch==2.9.1", "triton==3.5.1")  # triton: the version torch 2.9.1 requires
# numpy; the CUTLASS DSL, which the server's eval.py imports (its OpError), at the version of
# the GPU MODE runner image that also pinned torch 2.9.1 from cu130; PyYAML, which KernelBot's
# task loader imports (--harness kernelbot; that runner image installs it unpinned: here the
# version the kit's offline check of the loader ran with).
PYPI_PACKAGES = ("numpy==2.3.5", "nvidia-cutlass-dsl==4.3.5", "PyYAML==6.0.3")
# --image runner: the image of GPU MODE's Modal runner as it is now, gpu-mode/kernelbot
# src/runners/modal_runner.py at 4bdd839ad76eaac0cdab986d30f8d77f989a289b (2026-07-15; the image
# last changed in ae732f7bf6f9, 2026-07-06): its CUDA base and Python, its apt packages, its pip
# installs (one step per tuple, in its order, by uv as there; torch last, from PyPI), the CUTLASS
# C++ headers and the MathDx archive with the include paths it sets. Left out: its build-time checks
# (pip check, import and compile smoke tests).
RUNNER_CUDA_IMAGE = "nvidia/cuda:13.3.0-devel-ubuntu24.04"
RUNNER_PYTHON_VERSION = "3.13"
RUNNER_APT_PACKAGES = ("git", "curl", "gcc-13", "g++-13", "clang-18")
RUNNER_PIP_STEPS = (
    ("ninja~=1.11", "wheel~=0.45", "requests~=2.32.4", "packaging~=25.0", "numpy~=2.3", "pytest", "PyYAML"),
    ("tinygrad~=0.10", "helion"),
    ("nvidia-cutlass-dsl==4.5.2", "cuda-core[cu13]", "cuda-python[all]==13.0", "cuda-tile==1.4.0",
     "nvmath-python[cu13-dx]==0.9.0", "nvidia-libmathdx-cu13==0.3.2.6", "cuda-toolkit[cccl,nvrtc]==13.0.2"),
    ("torch==2.12.0",),
)
RUNNER_CUTLASS_TAG = "v4.5.2"  # the C++ headers, in /opt/cutlass
RUNNER_MATHDX = {"version": "26.06.0",
                 "url": "https://developer.download.nvidia.com/compute/cublasdx/redist/cublasdx/cuda13/"
                        "nvidia-mathdx-26.06.0-cuda13.tar.gz",
                 "sha256": "042b7c57a636c271cca32dffcc0a822ed6b2abc0b8ef5703ab2445d58563a1e6"}
RUNNER_ENV = {"CUTLASS_PATH": "/opt/cutlass", "MATHDX_HOME": "/opt/mathdx",
              "CPLUS_INCLUDE_PATH": "/opt/mathdx/include:/opt/mathdx/external/cutlass/include:"
                                    "/opt/cutlass/include:/opt/cutlass/tools/util/include"}
IMAGES = ("leaderboard", "runner")  # --image: the pins above, or kernelbot's runner image now
DEFAULT_IMAGE = "leaderboard"
ENV_IMAGE = "NVFP4_MODAL_IMAGE"  # set in each image, so that a container records the one it ran in
SERVER_FILES = kit_harness.SERVER_FILES  # what the server copies
LAYOUT_FILES = (*SERVER_FILES, *kit_harness.KIT_SUPPORT_FILES)  # ... and what the kit's reference.py imports
KIT_FILES = (*LAYOUT_FILES, "shapes.json")
MODES = ("test", "benchmark", "leaderboard", "all")
HARNESSES = ("kit", "server", "both", "kernelbot", "kit+kernelbot", "all")
# --harness -> the harnesses it runs, in this order, in one container on one GPU.
HARNESS_PLANS = {"both": ("kit", "server"), "kit+kernelbot": ("kit", "kernelbot"),
                 "all": ("kit", "server", "kernelbot")}
# The server's harness: gpu-mode/reference-kernels at the commit of each harness date
# (harness.HARNESS_DATES; they differ for this problem only in leaderboard mode's repeats):
# "2025-11-11", the files the nvfp4_gemv leaderboard ran on until its deadline (2025-11-29);
# "2026-01-13", the head the kit mirrors (its inputs compared bit for bit on an H100). The image
# build checks out each commit (an unknown one fails the build) and records the full hash in the
# folder's REVISION file, which every server result carries.
SERVER_REPO_URL = "https://github.com/gpu-mode/reference-kernels"
SERVER_COMMITS = {
    "2025-11-11": "baaabf45731387fae769db4f726d3c3f7051c561",  # "Feat: add cutedsl template"
    "2026-01-13": "f83cb92a534cc67fa98d7e9813e7f8238abdb4e0",  # the head (aaf640d's loops)
}
SERVER_COMMIT = SERVER_COMMITS[kit_harness.HARNESS_DATE]
SERVER_SOURCES = {  # file in the run folder -> path in the repository
    "eval.py": "problems/nvidia/eval.py",
    "utils.py": "problems/nvidia/utils.py",
    "reference.py": "problems/nvidia/nvfp4_gemv/reference.py",
    "task.py": "problems/nvidia/nvfp4_gemv/task.py",
}
SERVER_DIRS = {date: f"/root/server-{date}" for date in SERVER_COMMITS}
SERVER_DIR = SERVER_DIRS[kit_harness.HARNESS_DATE]
# --harness kernelbot: KernelBot's own task construction and evaluation of the server's task, as
# popcorn-cli's `submit --local` runs them in the user's Modal workspace (gpu-mode/popcorn-cli
# templates/local_modal_runner.py at 32461c1ad183b4c9f7d1ab56256fb3dbcdfdf27d:
# libkernelbot.task.make_task_definition on the problem's task.yml, build_task_config with the
# GPU's arch and the mode, libkernelbot.run_eval.run_config in a folder of its own), pinned where
# that runner follows main: kernelbot at KERNELBOT_COMMIT (the runner image's revision, --image
# runner), the task at the server commit the kit mirrors (SERVER_COMMITS[KERNELBOT_DATE]). The
# image build fetches both (the package src/libkernelbot; problems/nvidia's eval.py, utils.py and
# nvfp4_gemv/, whose task.yml names ../eval.py and ../utils.py) and records each full hash.
KERNELBOT_REPO_URL = "https://github.com/gpu-mode/kernelbot"
KERNELBOT_COMMIT = "4bdd839ad76eaac0cdab986d30f8d77f989a289b"
KERNELBOT_DATE = "2026-01-13"  # the harness date whose server files its task runs (f83cb92)
KERNELBOT_DIR = "/root/kernelbot"  # libkernelbot/ and REVISION
KERNELBOT_SOURCES = {"libkernelbot": "src/libkernelbot"}
KERNELBOT_TASK_DIR = "/root/kernelbot-task"  # eval.py, utils.py, nvfp4_gemv/ and REVISION
KERNELBOT_TASK_SOURCES = {"eval.py": "problems/nvidia/eval.py", "utils.py": "problems/nvidia/utils.py",
                          "nvfp4_gemv": "problems/nvidia/nvfp4_gemv"}
KERNELBOT_TASK = "nvfp4_gemv/task.yml"
KERNELBOT_GPU = "B200"  # KernelBot's name of the GPU whose arch build_task_config gets (its GPU_TO_SM)
# The kit's --mode -> KernelBot's mode: its leaderboard mode runs test, then benchmark, then
# leaderboard, each only if the one before passed (libkernelbot.run_eval.run_evaluation), as `all`.
KERNELBOT_MODES = {"test": "test", "benchmark": "benchmark", "leaderboard": "leaderboard", "all": "leaderboard"}
PROTOCOL_TIMEOUT_S = 1500  # one eval.py run
RESULTS_DIR = HERE / "benchmarks" / "results"
FUNCTION_OPTIONS = {"gpu": DEFAULT_GPU, "timeout": TIMEOUT_S}
# The jobs: each step runs in its own container, in a copy of the checkout at JOB_DIR.
JOBS = ("eval", "check", "bench", "sweep", "roofline", "ab", "all")
JOB_STEPS = ("check", "bench", "sweep")  # what --job all runs, in this order
# Each step's limit (its process is stopped there), above its H100 runtime: the whole suite ran
# there in four parts of up to 9 minutes on 2026-11-25 (about 36 minutes: tests/conftest.py's FILE_WEIGHTS),
# bench_kernel.py runs within .ci/gpu-run's 300 s, a full --sweep times ~440 configs (10 min and more).
STEP_TIMEOUT_S = {"check": 3600, "bench": 1200, "sweep": 3000, "roofline": 1200}
JOB_TIMEOUT_S = max(STEP_TIMEOUT_S.values()) + 300  # one step per call, with the container's start
# What the suite runs with (pyproject's dev extra): pytest, and kernelguard for the server's pre-check.
TEST_PACKAGES = ("pytest==9.0.3", "pytest-timeout==2.4.0", "kernelguard==0.3.1")
JOB_DIR = "/root/kit"
JOB_FILES = (*KIT_FILES, "submission.py", "audit.py", "ab.py", "cuda_check.py", "cute_check.py", "ncu_profile.py",
             "modal_app.py", "pyproject.toml", "README.md", "bundle.py")
JOB_DIRS = ("tests", "benchmarks", "examples", "docs", "kernels")
JOB_IGNORE = ["results", "**/__pycache__"]  # results stay local
# Not run in the container: the local side's tests (they run `modal` as a user does, without
# Modal credentials, which a container holds).
CHECK_IGNORE = ("tests/test_modal_app.py",)
JOB_OPTIONS = {"gpu": DEFAULT_GPU, "timeout": JOB_TIMEOUT_S}
# bench_kernel.py options a job sets itself (not accepted in --bench-args / --sweep-args).
JOB_SET_OPTIONS = ("json", "md", "sweep")
# Modal's GPU types (its GPU guide, modal.com/docs/guide/gpu), any case, optionally ":N" GPUs.
MODAL_GPUS = ("T4", "L4", "A10", "A10G", "L40S", "A100", "A100-40GB", "A100-80GB", "RTX-PRO-6000",
              "H100", "H100!", "H200", "B200", "B200+")
OUTPUT_TAIL_LINES = 200  # of a step's output, kept in its result
# What a job's record says of the container it ran in (job_environment's keys).
ENVIRONMENT_KEYS = ("device", "driver", "torch", "triton", "python", "date", "image", "cutlass_dsl")
# One ab run's limit (its process is stopped there): ab's defaults time 20 rounds x 3 shapes x 50
# leaderboard calls per file; not yet run on a B200, the limit is set generously for several
# --against files and larger --ab-args.
AB_TIMEOUT_S = 2400
AB_SET_OPTIONS = ("json", "new_first")  # ab options the job sets itself



def git_fetch_commands(repo_url: str, commit: str, sources: dict, dest: str, clone: str) -> list[str]:
    """Shell commands (one image build step each) that put ``sources`` ({name in dest: path in the
    repository}, files or folders) of ``commit`` into ``dest``, with the resolved full hash in
    dest/REVISION; a commit the repository does not have fails the build, saying so."""
    return [
        f"rm -rf {clone} && git clone --quiet --filter=blob:none --no-checkout {repo_url} {clone}",
        f"git -C {clone} rev-parse --verify --quiet {commit}^{{commit}} > {clone}.rev "
        f"|| (echo 'error: commit {commit} not found in {repo_url}' >&2; exit 1)",
        f"git -C {clone} checkout --quiet {commit} -- {' '.join(sources.values())}",
        f"mkdir -p {dest} && " + " && ".join(f"cp -r {clone}/{src} {dest}/{name}" for name, src in sources.items())
        + f" && mv {clone}.rev {dest}/REVISION && rm -rf {clone}",
    ]


def server_fetch_commands(commit: str = SERVER_COMMIT, dest: str = SERVER_DIR,
                          repo_url: str = SERVER_REPO_URL) -> list[str]:
    """Shell commands (one image build step each) that put the server's files of ``commit``
    into ``dest`` under their run-folder names, with the resolved full hash in dest/REVISION."""
    return git_fetch_commands(repo_url, commit, SERVER_SOURCES, dest, "/tmp/reference-kernels")


def kernelbot_fetch_commands(commit: str = KERNELBOT_COMMIT, task_commit: str = SERVER_COMMITS[KERNELBOT_DATE],
                             dest: str = KERNELBOT_DIR, task_dest: str = KERNELBOT_TASK_DIR,
                             repo_url: str = KERNELBOT_REPO_URL, task_repo_url: str = SERVER_REPO_URL) -> list[str]:
    """The image build steps of --harness kernelbot: KernelBot's package of ``commit`` into
    ``dest`` and the server's task folder of ``task_commit`` into ``task_dest``, each with its
    full hash in REVISION."""
    return (git_fetch_commands(repo_url, commit, KERNELBOT_SOURCES, dest, "/tmp/kernelbot")
            + git_fetch_commands(task_repo_url, task_commit, KERNELBOT_TASK_SOURCES, task_dest,
                                 "/tmp/reference-kernels-task"))


def _flag(argv: list[str], name: str, default: str) -> str:
    """The value of option ``name`` in ``argv`` (the last one given wins, as in click)."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _loaded_by_modal_run() -> bool:
    prog = Path(sys.argv[0])
    is_modal = prog.name == "modal" or (prog.name == "__main__.py" and prog.parent.name == "modal")
    return is_modal and "run" in sys.argv[1:3] and modal.is_local()


def selected_image(argv: list[str] | None = None) -> str:
    """The image this module builds its functions on: in a container, the one it runs in (ENV_IMAGE);
    under `modal run`, its --image (a value that is none of IMAGES builds the default, and the
    preflight refuses it); else the default."""
    if not modal.is_local():
        return os.environ.get(ENV_IMAGE, DEFAULT_IMAGE)
    if argv is None:
        argv = sys.argv[2:] if _loaded_by_modal_run() else []
    chosen = _flag(argv, "--image", DEFAULT_IMAGE)
    return chosen if chosen in IMAGES else DEFAULT_IMAGE


def runner_header_commands() -> tuple[str, ...]:
    """Shell steps that put the runner image's CUTLASS C++ headers and MathDx in /opt, as it has them."""
    archive = "/tmp/mathdx.tar.gz"
    return (f"git clone --quiet --depth 1 --branch {RUNNER_CUTLASS_TAG} https://github.com/NVIDIA/cutlass.git "
            "/opt/cutlass",
            f"curl -fsSL {RUNNER_MATHDX['url']} -o {archive} && echo '{RUNNER_MATHDX['sha256']}  {archive}' "
            f"| sha256sum -c - && mkdir -p /opt/mathdx && tar -xzf {archive} --strip-components=4 -C /opt/mathdx "
            f"&& rm {archive}")


def image_steps(kind: str) -> list[tuple]:
    """The build of image ``kind`` as data, step by step: ("registry", tag, python), ("apt", packages),
    ("pip", packages, index URL or None), ("uv", packages), ("run", commands), ("env", variables).
    Both end with the server's files, KernelBot's package and task (git steps) and ENV_IMAGE."""
    if kind == "leaderboard":
        steps = [("registry", CUDA_IMAGE, PYTHON_VERSION), ("apt", ("git",)),
                 ("pip", TORCH_PACKAGES, TORCH_INDEX_URL), ("pip", PYPI_PACKAGES, None)]
    elif kind == "runner":
        steps = [("registry", RUNNER_CUDA_IMAGE, RUNNER_PYTHON_VERSION),
                 ("run", ('ln -sf "$(command -v python)" /usr/local/bin/python3',)),
                 ("apt", RUNNER_APT_PACKAGES), *(("uv", packages) for packages in RUNNER_PIP_STEPS),
                 ("run", runner_header_commands()), ("env", RUNNER_ENV)]
    else:
        raise ValueError(f"--image must be one of {', '.join(IMAGES)}, got {kind!r}")
    fetch = tuple(c for date, commit in SERVER_COMMITS.items()
                  for c in server_fetch_commands(commit, SERVER_DIRS[date]))
    return [*steps, ("run", fetch), ("run", tuple(kernelbot_fetch_commands())), ("env", {ENV_IMAGE: kind})]


IMAGE_SOURCES = {"leaderboard": "the nvfp4_gemv leaderboard's time: torch 2.9.1 from cu130 with its triton, the "
                                 "CUTLASS DSL of kernelbot's runner image at 3777200a0a06 (2026-01-17)",
                 "runner": "gpu-mode/kernelbot src/runners/modal_runner.py at 4bdd839ad76eaac0cdab986d30f8d77f989a289b"}


def image_summary(kind: str) -> dict:
    """What image ``kind`` pins, for the records: its base, Python, the packages of its install
    steps, and where the pins come from."""
    steps = image_steps(kind)
    return {"image": kind, "base": steps[0][1], "python": steps[0][2],
            "packages": [p for op, *args in steps if op in ("pip", "uv") for p in args[0]],
            "source": IMAGE_SOURCES[kind]}


def build_base_image(kind: str) -> modal.Image:
    """The Modal image of ``image_steps(kind)`` (built by Modal when a function on it first runs)."""
    img = None
    for op, *args in image_steps(kind):
        if op == "registry":
            img = modal.Image.from_registry(args[0], add_python=args[1]).entrypoint([])
        elif op == "apt":
            img = img.apt_install(*args[0])
        elif op == "pip":
            img = img.pip_install(*args[0], index_url=args[1]) if args[1] else img.pip_install(*args[0])
        elif op == "uv":  # kernelbot's installer; pip where this modal has no uv_pip_install
            img = getattr(img, "uv_pip_install", img.pip_install)(*args[0])
        elif op == "run":
            img = img.run_commands(*args[0])
        elif op == "env":
            img = img.env(args[0])
    return img


# In the container the kit files sit in /root beside this module, as they do locally; the
# server's files in SERVER_DIR (a build step: local files have to come last). Only the selected
# image is defined, so `modal run` builds no other.
IMAGE_KIND = selected_image()
base_image = build_base_image(IMAGE_KIND)
image = base_image
for _name in KIT_FILES:
    image = image.add_local_file(HERE / _name, f"/root/{_name}")
# The jobs' image: the same layers and pytest, with the checkout's files in JOB_DIR.
job_image = base_image.pip_install(*TEST_PACKAGES)
for _name in JOB_FILES:
    job_image = job_image.add_local_file(HERE / _name, f"{JOB_DIR}/{_name}")
for _name in JOB_DIRS:
    job_image = job_image.add_local_dir(HERE / _name, f"{JOB_DIR}/{_name}", ignore=JOB_IGNORE)

app = modal.App(APP_NAME)


# ----------------------------------------------------------------------------- the GPU side

def plan(mode: str) -> list[str]:
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    return ["test", "benchmark", "leaderboard"] if mode == "all" else [mode]


def harness_plan(harness: str) -> list[str]:
    if harness not in HARNESSES:
        raise ValueError(f"--harness must be one of {', '.join(HARNESSES)}, got {harness!r}")
    return list(HARNESS_PLANS.get(harness, (harness,)))


def harness_sources(harness: str, kit_dir: str | Path = HERE, server_dir: str | Path = SERVER_DIR) -> dict:
    """{file in the run folder: where it comes from} of one harness (the submission aside)."""
    if harness == "kit":
        return {name: Path(kit_dir) / name for name in LAYOUT_FILES}
    return {name: Path(server_dir) / name for name in SERVER_FILES}


def harness_revision(harness: str, server_dir: str | Path = SERVER_DIR) -> str:
    """What ran: "this repository" for the kit; the server's full commit hash (from the image
    build's REVISION file) for the server."""
    if harness == "kit":
        return "this repository"
    rev = Path(server_dir) / "REVISION"
    return rev.read_text().strip() if rev.is_file() else f"unknown (no {rev})"


def _smi(field: str) -> str | None:
    """One field of the first GPU from nvidia-smi (this process never touches CUDA: the
    processes it starts have the GPU to themselves); None without one."""
    try:
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    values = proc.stdout.strip().splitlines()
    return values[0].strip() if proc.returncode == 0 and values else None


def gpu_name() -> str:
    """The GPU's name from nvidia-smi; "cpu (no CUDA)" without one."""
    return _smi("name") or "cpu (no CUDA)"


def image_in_use() -> str:
    """The image this process runs in (one of IMAGES, from ENV_IMAGE), or "none" outside them."""
    return os.environ.get(ENV_IMAGE) or "none"


def evaluate(submission_source: str, mode: str = "all", runs: int = 1,
             test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None,
             kit_dir: str | Path = HERE, harness: str = "kit", server_dir: str | Path | None = None,
             harness_date: str = kit_harness.HARNESS_DATE) -> dict:
    """Run one harness's eval.py in protocol mode on ``submission_source``, mode after mode, and
    return ``{"device", "harness", "harness_date", "revision", "passed", "modes": {mode: [run,
    ...]}}`` (``harness_date``: the kit's leaderboard repeats, or the server's files of that
    date unless ``server_dir`` names a folder) where
    each run holds the exit status, the parsed lines, the summary and the tail of stderr. A
    mode passes when eval.py exits 0, logs ``check: pass`` and every case passed (the server's
    leaderboard mode exits 0 after a failure)."""
    if harness == "kernelbot":
        return kernelbot_evaluate(submission_source, mode, runs, test_shapes, benchmark_shapes, kit_dir)
    if harness not in ("kit", "server"):
        raise ValueError(f"harness must be kit, server or kernelbot, got {harness!r}")
    kit_dir = Path(kit_dir)
    shapes = kit_harness.load_shapes(kit_dir / "shapes.json")
    cases = {"test": test_shapes or shapes["tests"], "timed": benchmark_shapes or shapes["benchmarks"]}
    sol = kit_harness.sol_lookup(shapes)
    # The kit's eval.py also logs the median; the server's runs in the environment as it is.
    env = {"POPCORN_SEED": None, kit_harness.ENV_LOG_MEDIAN: "1" if harness == "kit" else None,
           kit_harness.ENV_HARNESS_DATE: harness_date if harness == "kit" else None}
    server_dir = server_dir or SERVER_DIRS[harness_date]
    result = {"device": gpu_name(), "image": image_in_use(), "harness": harness, "harness_date": harness_date,
              "revision": harness_revision(harness, server_dir), "passed": True, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="nvfp4_eval_") as tmp:
        work = Path(tmp)
        for name, src in harness_sources(harness, kit_dir, server_dir).items():
            shutil.copy(src, work / name)
        (work / "submission.py").write_text(submission_source)
        (work / "tests.txt").write_text(kit_harness.test_file_text(cases["test"]))
        (work / "benchmarks.txt").write_text(kit_harness.test_file_text(cases["timed"]))
        for m in plan(mode):
            for _ in range(1 if m == "test" else max(1, runs)):
                test_file = "tests.txt" if m == "test" else "benchmarks.txt"
                t0 = time.time()
                proc = kit_harness.run_protocol(work, m, test_file, timeout=PROTOCOL_TIMEOUT_S, env=env)
                summary = kit_harness.summarize(m, kit_harness.results_from_popcorn(proc.lines, m), sol)
                summary["passed"] = summary["passed"] and proc.returncode == 0 and proc.lines.get("check") == "pass"
                result["modes"].setdefault(m, []).append({
                    "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
                    "lines": proc.lines, "summary": summary, "stderr_tail": proc.stderr[-4000:]})
                if not summary["passed"]:
                    result["passed"] = False
                    return result
    return result


@contextlib.contextmanager
def _kernelbot_here(kernelbot_dir: Path, work: Path):
    """While the block runs: ``kernelbot_dir`` first on the import path, ``work`` the working
    directory (run_config writes the task's files there and runs ``python3 eval.py`` from it), and
    ``python3`` on PATH this interpreter (the one with the image's packages); all put back after."""
    saved = os.getcwd(), os.environ.get("PATH", ""), list(sys.path)
    bin_dir = work / ".bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    sys.path.insert(0, str(kernelbot_dir))
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{saved[1]}"
    os.chdir(work)
    try:
        yield
    finally:
        os.chdir(saved[0])
        os.environ["PATH"] = saved[1]
        sys.path[:] = saved[2]


def kernelbot_entry(kind: str, stage: dict, sol: dict) -> dict:
    """One stage of KernelBot's result (an EvalResult as a dict; ``kind`` test, benchmark or
    leaderboard) as ``evaluate`` records a run: exit status, seconds, the parsed lines, the
    summary (passed: exit 0, ``check: pass`` and every case passed), the tail of stderr."""
    run = stage.get("run") or {}
    lines = {str(k): str(v) for k, v in (run.get("result") or {}).items()}
    summary = kit_harness.summarize(kind, kit_harness.results_from_popcorn(lines, kind), sol)
    summary["passed"] = summary["passed"] and run.get("exit_code") == 0 and lines.get("check") == "pass"
    compiled = stage.get("compilation") or {}
    tail = "\n".join(x for x in (compiled.get("stderr") if compiled.get("success") is False else "",
                                  run.get("stderr") or "") if x)
    return {"returncode": run.get("exit_code"), "seconds": round(float(run.get("duration") or 0), 1), "lines": lines,
            "summary": summary, "stderr_tail": tail[-4000:]}


def kernelbot_evaluate(submission_source: str, mode: str = "all", runs: int = 1,
                       test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None,
                       kit_dir: str | Path = HERE, kernelbot_dir: str | Path | None = None,
                       task_dir: str | Path | None = None) -> dict:
    """KernelBot's evaluation of ``submission_source`` as popcorn-cli's local runner makes it:
    the task definition from ``task_dir``'s task.yml, ``build_task_config`` (the B200's arch and
    KernelBot's mode for ``mode``, ``KERNELBOT_MODES``), ``run_config``; once, or for the timed
    modes ``runs`` times. ``test_shapes`` / ``benchmark_shapes`` replace the task's cases (the
    offline tests' small ones). Returns what ``evaluate`` returns (harness "kernelbot", revision
    both full hashes) with KernelBot's system record; a stage is recorded under its own name.
    ``kernelbot_dir`` / ``task_dir``: where the image build put them (None: KERNELBOT_DIR,
    KERNELBOT_TASK_DIR)."""
    from dataclasses import asdict, is_dataclass

    kernelbot_dir, task_dir = Path(kernelbot_dir or KERNELBOT_DIR), Path(task_dir or KERNELBOT_TASK_DIR)
    device = gpu_name()
    revisions = [harness_revision("server", d) for d in (kernelbot_dir, task_dir)]
    plan(mode)  # a mode the kit knows
    result = {"device": device, "image": image_in_use(), "harness": "kernelbot", "harness_date": KERNELBOT_DATE,
              "revision": f"gpu-mode/kernelbot at {revisions[0]}, gpu-mode/reference-kernels at {revisions[1]}",
              "passed": True, "modes": {},
              "kernelbot_mode": KERNELBOT_MODES[mode]}
    sol = kit_harness.sol_lookup(kit_harness.load_shapes(Path(kit_dir) / "shapes.json"))
    for i in range(1 if mode == "test" else max(1, runs)):
        with tempfile.TemporaryDirectory(prefix="nvfp4_kernelbot_") as tmp, _kernelbot_here(kernelbot_dir, Path(tmp)):
            try:
                from libkernelbot.consts import GPU_TO_SM, SubmissionMode
                from libkernelbot.run_eval import run_config
                from libkernelbot.task import build_task_config, make_task_definition

                definition = make_task_definition(task_dir / KERNELBOT_TASK)
                config = build_task_config(task=definition.task, submission_content=submission_source,
                                           arch=GPU_TO_SM.get(KERNELBOT_GPU) if "B200" in device.upper() else None,
                                           mode=SubmissionMode(result["kernelbot_mode"]))
                config.update({k: v for k, v in (("tests", test_shapes), ("benchmarks", benchmark_shapes)) if v})
                full = run_config(config)
            except Exception as exc:  # noqa: BLE001 - KernelBot failed to run: recorded, as the local runner does
                result.update(passed=False, error=kit_harness.one_line(f"{type(exc).__name__}: {exc}"))
                return result
        full = asdict(full) if is_dataclass(full) else full
        result["system"] = full.get("system")
        stages = full.get("runs") or {}
        if not full.get("success") or not stages:
            result.update(passed=False, error=kit_harness.one_line(full.get("error") or "run_config ran no stage"))
            return result
        for kind, stage in stages.items():
            if i and kind == "test":  # KernelBot's leaderboard mode tests again each time: recorded once
                continue
            entry = kernelbot_entry(kind, stage, sol)
            result["modes"].setdefault(kind, []).append(entry)
            result["passed"] = result["passed"] and entry["summary"]["passed"]
        if not result["passed"]:
            return result
    return result


@app.function(image=image, **FUNCTION_OPTIONS)
def run_remote(submission_source: str, mode: str = "all", runs: int = 1,
               test_shapes: list[dict] | None = None, benchmark_shapes: list[dict] | None = None,
               harnesses: list[str] | None = None, harness_date: str = kit_harness.HARNESS_DATE) -> list[dict]:
    """``evaluate`` once per harness (default: the kit's), in turn, on the same GPU."""
    return [evaluate(submission_source, mode, runs, test_shapes, benchmark_shapes, harness=h,
                     harness_date=harness_date) for h in harnesses or ["kit"]]


# ----------------------------------------------------------------------------- the jobs, GPU side

def job_plan(job: str) -> list[str]:
    if job not in JOBS or job in ("eval", "ab"):
        raise ValueError(f"--job must be one of {', '.join(j for j in JOBS if j not in ('eval', 'ab'))} here, "
                         f"got {job!r}")
    return list(JOB_STEPS) if job == "all" else [job]


def job_command(step: str, extra_args: str, out_dir: str | Path) -> list[str]:
    """The command line of one step, run from the kit's root; its files go to ``out_dir``."""
    if step == "check":
        return [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                f"--junitxml={Path(out_dir) / 'junit.xml'}", *(f"--ignore={p}" for p in CHECK_IGNORE)]
    if step not in ("bench", "sweep", "roofline"):
        raise ValueError(f"unknown step {step!r}")
    return ([sys.executable, "benchmarks/bench_kernel.py", *({"sweep": ["--sweep"], "roofline": ["--roofline"]}
                                                              .get(step, [])),
             "--json", str(Path(out_dir) / f"{step}.json"), "--md", str(Path(out_dir) / f"{step}.md")]
            + shlex.split(extra_args))


def job_environment() -> dict:
    """What a step ran on: GPU, driver, torch, triton, Python, date."""
    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"
    return {"device": gpu_name(), "driver": _smi("driver_version") or "none", "torch": version("torch"),
            "triton": version("triton"), "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
            "image": image_in_use(), "cutlass_dsl": version("nvidia-cutlass-dsl")}


def run_logged(cmd: list[str], cwd: str | Path, timeout: float, echo: bool = True) -> tuple[int, str, bool]:
    """(exit status, the last OUTPUT_TAIL_LINES lines of output, whether it was stopped) of
    ``cmd``, its output (stderr merged) echoed as it comes (Modal shows a container's output
    live); after ``timeout`` seconds its process group is killed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVFP4_")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    stopped = []

    def stop():
        stopped.append(True)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, stop)
    timer.start()
    tail = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    try:
        for line in proc.stdout:
            if echo:
                print(line, end="", flush=True)
            tail.append(line)
        code = proc.wait()
    finally:
        timer.cancel()
    return code, "".join(tail), bool(stopped)


def _node_id(case: ET.Element, kit_dir: Path) -> str:
    """pytest's id of a junit testcase (tests/test_x.py::test_name[id]) where its file is found."""
    parts = (case.get("classname") or "").split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (kit_dir / path).is_file():
            return "::".join([path, *parts[i:], case.get("name", "?")])
    return f"{case.get('classname')}::{case.get('name')}"


def junit_summary(path: str | Path, kit_dir: str | Path) -> dict:
    """{"junit": counts, "failures": [{"name", "kind", "message"}], "skipped": {reason: count}}
    of pytest's --junitxml report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["seconds"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    failures, skipped = [], collections.Counter()
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            for el in case.findall(kind):
                message = " ".join((el.get("message") or el.text or "").split())
                failures.append({"name": _node_id(case, Path(kit_dir)), "kind": kind, "message": message[:500]})
        for el in case.findall("skipped"):
            skipped[" ".join((el.get("message") or "").split())] += 1
    return {"junit": counts, "failures": failures, "skipped": dict(skipped.most_common())}


def job_step(step: str, extra_args: str = "", kit_dir: str | Path = JOB_DIR, echo: bool = True) -> dict:
    """Run one step in ``kit_dir`` and return what it produced: the environment, the command,
    exit status, seconds, whether it was stopped at its limit, the output's tail, and for
    check the junit summary, for bench and sweep bench_kernel.py's JSON and Markdown (None
    where the step did not write them)."""
    kit_dir = Path(kit_dir)
    result = {"step": step, **job_environment()}
    with tempfile.TemporaryDirectory(prefix=f"nvfp4_{step}_") as tmp:
        cmd = job_command(step, extra_args, tmp)
        result["command"] = shlex.join(["python3", *cmd[1:]]).replace(tmp, "OUT")
        t0 = time.time()
        code, tail, stopped = run_logged(cmd, kit_dir, STEP_TIMEOUT_S[step], echo)
        result.update(returncode=code, seconds=round(time.time() - t0, 1), timed_out=stopped, output_tail=tail)
        out = Path(tmp)
        if step == "check":
            report = out / "junit.xml"
            result.update(junit_summary(report, kit_dir) if report.is_file() else {"junit": None})
        else:
            written, md = out / f"{step}.json", out / f"{step}.md"
            result["json"] = json.loads(written.read_text()) if written.is_file() else None
            result["md"] = md.read_text() if md.is_file() else None
    result["passed"] = code == 0 and not stopped
    return result


@app.function(image=job_image, **JOB_OPTIONS)
def run_job_remote(step: str, extra_args: str = "") -> dict:
    """One step of a job (``job_step``) in the copy of the checkout in JOB_DIR."""
    return job_step(step, extra_args)


# ----------------------------------------------------------------------------- --job ab, GPU side

def ab_job(new: dict, against: list[dict], ab_args: str = "", kit_dir: str | Path = JOB_DIR,
           echo: bool = True) -> dict:
    """One ``python3 eval.py ab NEW BASE... --new-first`` in ``kit_dir``: ``new`` and each of
    ``against`` is {"name", "source"}, a file of the user's. Returns the environment, the command,
    exit status, seconds, the output's tail, ab's JSON record (None where it wrote none), the
    files, and ``passed``."""
    kit_dir = Path(kit_dir)
    result = {"step": "ab", **job_environment(), "files": []}
    with tempfile.TemporaryDirectory(prefix="nvfp4_ab_") as tmp:
        paths = []
        for i, item in enumerate([new, *against]):
            folder = Path(tmp) / f"file{i}"
            folder.mkdir()
            target = folder / Path(item["name"]).name
            target.write_text(item["source"])
            result["files"].append({"file": target.name, "name": item["name"]})
            paths.append(str(target))
        out = Path(tmp) / "ab.json"
        cmd = [sys.executable, "eval.py", "ab", *paths, "--new-first", "--json", str(out), *shlex.split(ab_args)]
        result["command"] = shlex.join(["python3", *cmd[1:]]).replace(tmp, "TMP")
        t0 = time.time()
        code, tail, stopped = run_logged(cmd, kit_dir, AB_TIMEOUT_S, echo)
        result.update(returncode=code, seconds=round(time.time() - t0, 1), timed_out=stopped,
                      output_tail=tail.replace(tmp, "TMP"))
        result["json"] = json.loads(out.read_text().replace(tmp, "TMP")) if out.is_file() else None
    result["passed"] = code == 0 and not stopped
    return result


@app.function(image=job_image, gpu=DEFAULT_GPU, timeout=AB_TIMEOUT_S + 600)
def run_ab_remote(new: dict, against: list[dict], ab_args: str = "") -> dict:
    """``ab_job`` in the copy of the checkout in JOB_DIR, on one GPU."""
    return ab_job(new, against, ab_args)


# ----------------------------------------------------------------------------- the local side

def report(result: dict) -> str:
    """The tables of every run of one harness (eval.py's formatter) and, for repeated timed
    modes, the per-run geometric means and their average."""
    out = [f"=== harness: {result['harness']} ({harness_label(result)})", ""]
    if result.get("error"):  # the harness itself did not run (KernelBot's, where it fails to load or run)
        out += [f"error: {result['error']}", ""]
    for m, entries in result["modes"].items():
        geos = []
        for i, entry in enumerate(entries):
            title = f"[{m} run {i + 1}/{len(entries)}]" if len(entries) > 1 else f"[{m}]"
            out += [title, kit_harness.format_table(entry["summary"], result["device"])]
            if entry["returncode"] not in (0, kit_harness.EXIT_FAIL) or not entry["summary"]["cases"]:
                out.append(f"eval.py exited {entry['returncode']}; remote stderr (tail):\n"
                           + entry["stderr_tail"][-2000:])
            elif not entry["summary"]["passed"]:
                out.append("remote stderr (tail):\n" + entry["stderr_tail"][-1500:])
            geos.append(entry["summary"].get("geomean_mean_us"))
            out += [f"warning: {line}" for line in kit_harness.impossible_times(entry["summary"], result["device"])]
            out.append("")
        if m != "test" and len(entries) > 1:
            shown = ", ".join(kit_harness.fmt(g) for g in geos)
            ok = [g for g in geos if g is not None]
            avg = sum(ok) / len(ok) if ok and len(ok) == len(geos) else None
            out.append(f"{m}: geomean of means per run: {shown} µs; average {kit_harness.fmt(avg)} µs")
            out.append("")
    note = kit_harness.unknown_peak_note(result["device"])
    if note and any(m != "test" for m in result["modes"]):
        out.append(f"warning: {note}")
    out.append(f"{result['harness']}: {'PASS' if result['passed'] else 'FAIL'}")
    return "\n".join(out)


def flag_impossible_times(results: list[dict]) -> None:
    """Add to each timed run's summary the shapes timed below bytes / the GPU's peak bandwidth
    (``harness.impossible_times``; both harnesses clear the L2 before every timed call), as
    ``impossible_times`` in the JSON."""
    for result in results:
        for m, entries in result.get("modes", {}).items():
            for entry in entries if m != "test" else []:
                entry["summary"]["impossible_times"] = kit_harness.impossible_times(entry["summary"], result["device"])


def harness_label(result: dict) -> str:
    if result["harness"] == "kit":
        return "this repository's eval.py, task.py, utils.py, reference.py"
    if result["harness"] == "kernelbot":
        return f"KernelBot's run_config, {result.get('kernelbot_mode', '?')} mode, on {result['revision']}"
    return f"the server's files, {SERVER_REPO_URL.split('github.com/')[-1]} at {result['revision']}"


def comparison(results: list[dict]) -> str:
    """Verdict and geomean of means (last run) per mode, one column per harness."""
    head = f"{'mode':<12}" + "".join(f"{r['harness']:>24}" for r in results)
    lines = [f"harnesses side by side on {results[0]['device']}:", head]
    for m in plan("all"):
        cells = []
        for r in results:
            entry = (r["modes"].get(m) or [None])[-1]
            if entry is None:
                cells.append("not run")
                continue
            geo = entry["summary"].get("geomean_mean_us")
            cells.append(("PASS" if entry["summary"]["passed"] else "FAIL")
                         + ("" if geo is None else f" {kit_harness.fmt(geo)} µs"))
        lines.append(f"{m:<12}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def default_out(gpu: str) -> Path:
    return RESULTS_DIR / f"modal-{gpu.lower().replace(':', 'x')}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def _slug(name: str) -> str:
    """A GPU model as a file-name part: "NVIDIA B200" -> "nvidia-b200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def _provenance_line(info: dict) -> str:
    return (f"{info.get('device', '?')}, driver {info.get('driver', '?')}, torch {info.get('torch', '?')}, "
            f"triton {info.get('triton', '?')}, Python {info.get('python', '?')}, image "
            f"{info.get('image') or info.get('image_requested', '?')}; {info.get('date', '?')}; "
            f"kit {info.get('kit_revision', '?')} (kernel revision {info.get('kernel_revision', '?')})")


def _output_block(result: dict, lines: int = 40) -> list[str]:
    tail = "".join((result.get("output_tail") or "").splitlines(True)[-lines:]).rstrip()
    return ["Output (tail):", "", "```", tail or "(none)", "```"]


def _step_verdict(result: dict) -> str:
    """One line: the step's verdict and why."""
    if result.get("error"):
        return f"FAIL ({result['error']})"
    why = (f"stopped at its limit of {STEP_TIMEOUT_S[result['step']]} s" if result.get("timed_out")
           else f"exit {result.get('returncode')}")
    counts = result.get("junit")
    if counts:
        why = (f"{counts['passed']} passed, {counts['failures']} failed, {counts['errors']} with errors, "
               f"{counts['skipped']} skipped in {counts['seconds']} s; " + why)
    return ("PASS" if result.get("passed") else "FAIL") + f" ({why})"


def sweep_tables(sweeps: dict, top: int | None = None) -> list[str]:
    """Markdown: per "shape backend" of a sweep, its configs ranked as benchmarks/apply_table.py
    ranks them (server-protocol time; clean time within 1%), wrong ones and probes counted."""
    from benchmarks.apply_table import rank

    out = []
    for key, records in sweeps.items():
        ranked = rank(records)
        wrong = sum(1 for r in records if r.get("bad") and r["bad"] != ["probe"])
        shown = ranked if top is None else ranked[:top]
        out += [f"### {key}: {len(ranked)} configs ranked, {wrong} wrong"
                + ("" if len(shown) == len(ranked) else f" (the first {len(shown)})"), ""]
        if not ranked:
            continue
        out += ["| rank | config | server µs | clean µs | server ceiling / kernel | ceiling / kernel |",
                "|---|---|---|---|---|---|"]
        out += [f"| {i} | {tuple(r['cfg'])} | {r['server_us']:.2f} | {r['us']:.2f} | "
                f"{r.get('server_ratio', float('nan')):.3f} | {r.get('ratio', float('nan')):.3f} |"
                for i, r in enumerate(shown, 1)]
        out.append("")
    return out


def b200_projection(bench: dict | None, device: str) -> list[str]:
    """Markdown: a B200 bench run's cuda times beside benchmarks/projection.py's model of them
    (shape, config, measured µs, projected µs, ratio); [] on another GPU or without cuda rows."""
    if not bench or "B200" not in (device or ""):
        return []
    from benchmarks.projection import measured_beside_projected

    try:
        lines = measured_beside_projected(bench)
    except Exception as exc:  # the report must not be lost to its last table
        lines = ["## B200: measured beside the projection", "", f"not projected ({type(exc).__name__}: {exc})"]
    return lines + [""] if lines else []


def job_report(result: dict, provenance: dict) -> tuple[dict, str, str]:
    """(the record written as JSON, its Markdown, a shorter text for the terminal) of one
    step's result. bench and sweep: bench_kernel.py's JSON (info, command, rows, sweeps),
    ``info`` completed with the driver and the checkout's revision, plus ``job``; check:
    ``info``, ``job``, the junit counts, failures and skip reasons."""
    step = result["step"]
    env = {k: result[k] for k in ENVIRONMENT_KEYS if k in result}
    job = {k: result.get(k) for k in ("step", "command", "returncode", "seconds", "timed_out", "passed", "error",
                                      "output_tail")}
    bench = result.get("json") if step != "check" else None
    info = {**env, **provenance, **((bench or {}).get("info") or {})}
    info["kit_revision"] = provenance["kit_revision"]  # the container has no git checkout
    if step == "check":
        record = {"info": info, "job": job, **{k: result.get(k) for k in ("junit", "failures", "skipped")}}
    else:
        record = {**(bench or {}), "info": info, "job": job}
    title = {"check": "Test suite", "bench": "Kernel benchmark", "sweep": "Config sweep", "roofline": "Roofline"}[step]
    head = [f"# {title} on {info.get('device', 'an unknown GPU')}", "",
            f"`modal run modal_app.py --job {step}`: {_provenance_line(info)}.", "",
            f"Command (in the container, from the kit's root): `{result.get('command', '?')}`", "",
            f"{step}: {_step_verdict(result)}", ""]
    body = []
    if step == "check":
        if result.get("failures"):
            body += ["Failures:", ""] + [f"- `{f['name']}` ({f['kind']}): {f['message']}" for f in result["failures"]]
            body.append("")
        if result.get("skipped"):
            body += ["Skipped, by reason:", ""] + [f"- {n} x {why}" for why, n in result["skipped"].items()] + [""]
        if not result.get("junit") or result.get("failures"):
            body += _output_block(result)
        return record, "\n".join(head + body) + "\n", "\n".join(head + body)
    short = []
    if step == "sweep" and bench and bench.get("sweeps"):
        body += ["## Ranked configs", ""] + sweep_tables(bench["sweeps"])
        short += ["## Ranked configs (the first 5 of each)", ""] + sweep_tables(bench["sweeps"], top=5)
    if result.get("md"):
        table = re.sub(r"^# ", "## ", result["md"], count=1, flags=re.M)
        body += [table]
        short += [table]
    if step == "bench":
        projected = b200_projection(bench, info.get("device", ""))
        body += projected
        short += projected
    if not result.get("passed"):
        body += _output_block(result)
        short += _output_block(result)
    return record, "\n".join(head + body) + "\n", "\n".join(head + short)


def write_report(out_dir: Path, record: dict, markdown: str, step: str, when: str) -> tuple[Path, Path]:
    """benchmarks/results/STEP-GPU-DATE.json and .md (GPU: the model that ran)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{step}-{_slug(record['info'].get('device') or 'unknown')}-{when}"
    paths = stem.with_suffix(".json"), stem.with_suffix(".md")
    paths[0].write_text(json.dumps(record, indent=1, default=str) + "\n")
    paths[1].write_text(markdown)
    return paths


def run_jobs(job: str, gpu: str, out: str, bench_args: str, sweep_args: str, image: str = DEFAULT_IMAGE) -> int:
    """The local side of the jobs: each step in its own container, in turn; each one's results
    printed and written as soon as it returns, whatever the earlier ones did. Exit status: 0
    every step passed, 1 one failed (2: Modal could not be reached; stops at once)."""
    from benchmarks.apply_table import kernel_revision, kit_revision

    provenance = {"kit_revision": kit_revision(HERE), "kernel_revision": kernel_revision(HERE / "submission.py"),
                  "gpu_requested": gpu, "image_requested": image, "image_pins": image_summary(image)}
    out_dir = Path(out) if out else RESULTS_DIR
    fn = run_job_remote if gpu == DEFAULT_GPU else run_job_remote.with_options(gpu=gpu)
    extra = {"check": "", "bench": bench_args, "sweep": sweep_args, "roofline": ""}
    verdicts = []
    for step in job_plan(job):
        print(f"running {step} on Modal ({gpu}), kit {provenance['kit_revision']} ...", file=sys.stderr)
        try:
            result = fn.remote(step, extra[step])
        except modal.exception.AuthError:
            _fail(NO_TOKEN)
        except modal.exception.ConnectionError as exc:
            _fail(f"error: cannot reach Modal: {' '.join(str(exc).split())}")
        except Exception as exc:  # the container failed: image build, timeout, GPU unavailable...
            result = {"step": step, "device": gpu, "passed": False,
                      "error": f"the remote run failed: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
        record, markdown, short = job_report(result, provenance)
        paths = write_report(out_dir, record, markdown, step, time.strftime("%Y%m%d-%H%M%S"))
        print(short)
        if step == "sweep" and result.get("json"):
            print(f"to write the winners into submission.py's table: python3 benchmarks/apply_table.py {paths[0]}")
        if step == "roofline" and result.get("json"):
            print(roofline_plot(result["json"], paths[0].with_suffix(".png")), file=sys.stderr)
        print(f"{step} results written to {paths[0]} and {paths[1]}", file=sys.stderr)
        verdicts.append((step, result))
    print("\n".join(f"{step}: {_step_verdict(result)}" for step, result in verdicts))
    return 0 if all(result.get("passed") for _, result in verdicts) else 1


def roofline_plot(record: dict, path: Path) -> str:
    """Draw a roofline record's plot here (the container's PNG does not come back; the plot is
    a function of the record, benchmarks/roofline.py's ``plot``); a line saying where, or why not."""
    try:
        from benchmarks.roofline import plot
        plot(record, path)
    except Exception as exc:  # noqa: BLE001 - no matplotlib here, or a record without rows: said, not fatal
        return (f"roofline plot not drawn ({type(exc).__name__}: {exc}); later: python3 -m benchmarks.roofline "
                f"--plot-from {path.with_suffix('.json')} --out {path}")
    return f"roofline plot written to {path}"


def ab_markdown(result: dict, provenance: dict) -> str:
    """The Markdown of one --job ab result: what ran where, the files, ab's table."""
    import ab

    info = {**{k: result.get(k) for k in ENVIRONMENT_KEYS}, **provenance}
    lines = [f"# A/B timing on {info.get('device') or 'an unknown GPU'}", "",
             f"`modal run modal_app.py --job ab`: {_provenance_line(info)}.", "",
             f"Command (in the container, from the kit's root): `{result.get('command', '?')}`", ""]
    lines += [f"- `{f['file']}`: the local file {f['name']}" for f in result.get("files", [])]
    lines.append("")
    if result.get("json"):
        lines += ["```", ab.format_report(result["json"]), "```", ""]
    verdict = "PASS" if result.get("passed") else ("FAIL (" + (result.get("error") or
                                                               f"exit {result.get('returncode')}") + ")")
    lines.append(f"ab: {verdict}")
    if not result.get("passed"):
        lines += [""] + _output_block(result)
    return "\n".join(lines) + "\n"


def run_ab(submission: str, against: str, gpu: str, out: str, ab_args: str, image: str = DEFAULT_IMAGE) -> int:
    """The local side of --job ab: one remote call, its table printed, JSON and Markdown written
    under --out (default benchmarks/results/ab-GPU-DATE.*). Exit status 0 when ab passed, else 1."""
    from benchmarks.apply_table import kernel_revision, kit_revision

    provenance = {"kit_revision": kit_revision(HERE), "kernel_revision": kernel_revision(HERE / "submission.py"),
                  "gpu_requested": gpu, "image_requested": image, "image_pins": image_summary(image)}
    new = {"name": Path(submission).name, "source": Path(submission).read_text()}
    bases = [{"name": Path(item).name, "source": Path(item).read_text()} for item in against_items(against)]
    fn = run_ab_remote if gpu == DEFAULT_GPU else run_ab_remote.with_options(gpu=gpu)
    print(f"running ab on Modal ({gpu}): {submission} against {against} ...", file=sys.stderr)
    try:
        result = fn.remote(new, bases, ab_args)
    except modal.exception.AuthError:
        _fail(NO_TOKEN)
    except modal.exception.ConnectionError as exc:
        _fail(f"error: cannot reach Modal: {' '.join(str(exc).split())}")
    except Exception as exc:  # the container failed: image build, timeout, GPU unavailable...
        result = {"step": "ab", "device": gpu, "passed": False, "files": [],
                  "error": f"the remote run failed: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
    markdown = ab_markdown(result, provenance)
    record = {"info": {**{k: result.get(k) for k in ENVIRONMENT_KEYS}, **provenance},
              "job": {k: v for k, v in result.items() if k != "json"}, "ab": result.get("json")}
    out_dir = Path(out) if out else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"ab-{_slug(result.get('device') or 'unknown')}-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    stem.with_suffix(".md").write_text(markdown)
    print(markdown)
    print(f"ab results written to {stem}.json and {stem}.md", file=sys.stderr)
    return 0 if result.get("passed") else 1


def _has_token() -> bool:
    from modal.config import config
    return bool(config.get("token_id")) and bool(config.get("token_secret"))


NO_TOKEN = "error: no Modal token found. Run `modal setup` once (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)."

# The local entrypoint's options, in its parameter order: (metavar, what it does). `modal run`
# builds its options from main()'s signature without any help text, so this module prints
# this table for `modal run modal_app.py --help` (see preflight).
OPTION_HELP = {
    "job": ("|".join(JOBS), "eval = time a submission with eval.py (the options below; the default); "
            "ab = --submission against each --against, paired A/B timing (python3 eval.py ab); "
            "check = the kit's whole test suite on the GPU (junit counts, failures); bench = "
            "benchmarks/bench_kernel.py (kernel times against the read ceiling); sweep = bench_kernel.py "
            "--sweep (every backend's configs ranked; apply the winners with benchmarks/apply_table.py); "
            "roofline = bench_kernel.py --roofline (38 shapes against floor + bytes / read bandwidth; the "
            "plot drawn here from the record); all = check, bench, sweep in turn, each reported even if an "
            "earlier one failed. The jobs run this checkout's files and write JSON and Markdown per step to --out"),
    "submission": ("PATH", "eval: the submission file (default submission.py)"),
    "mode": ("|".join(MODES), "eval: test, benchmark or leaderboard; all = the three in turn, each only if "
             "the previous passed (default all)"),
    "harness": ("|".join(HARNESSES), "eval: kit = this repository's eval.py, task.py, utils.py, reference.py; "
                f"server = those of {SERVER_REPO_URL.split('github.com/')[-1]} at the --harness-date's commit "
                "(fetched when the image is built); kernelbot = KernelBot's own evaluation (libkernelbot.run_eval."
                "run_config, as popcorn-cli's submit --local calls it) of the server's task, pinned: "
                f"gpu-mode/kernelbot {KERNELBOT_COMMIT[:7]}, the task at {SERVER_COMMITS[KERNELBOT_DATE][:7]} "
                f"(harness date {KERNELBOT_DATE} only); both = kit, then server; kit+kernelbot = kit, then kernelbot; "
                "all = kit, server, kernelbot; each set in one container on the same GPU (default kit)"),
    "harness_date": ("|".join(kit_harness.HARNESS_DATES), "eval: the server's leaderboard loop of that date, for both "
                     "harnesses: 2025-11-11 = the nvfp4_gemv leaderboard's own (200 repeats per case, "
                     f"{SERVER_COMMITS['2025-11-11'][:7]}; use it to compare with the public results), 2026-01-13 = "
                     f"the head ({SERVER_COMMITS['2026-01-13'][:7]}, 1000 repeats; default)"),
    "runs": ("N", "eval: how often each timed mode runs, at least 1 (default 1): every run's table, then the "
             "average of the per-run geometric means"),
    "gpu": ("NAME", f"the Modal GPU type (default {DEFAULT_GPU}; e.g. H100; one of {', '.join(MODAL_GPUS)}, "
            "with :N for N GPUs). The server's reference.py uses FP4 torch._scaled_mm, which needs a B200"),
    "out": ("PATH", "eval: where the JSON results go (default benchmarks/results/modal-GPU-DATE.json); the "
            "other jobs: the folder for their STEP-GPU-DATE.json and .md (default benchmarks/results)"),
    "bench_args": ("ARGS", "bench: more options for bench_kernel.py, one quoted string (e.g. \"--shapes all "
                   "--reps 80\"); checked against bench_kernel.py's options before Modal is contacted"),
    "sweep_args": ("ARGS", "sweep: more options for bench_kernel.py --sweep, one quoted string (e.g. "
                   "\"--backends cuda\", or \"--grid benchmarks/FILE.json\" for a shorter grid)"),
    "against": ("BASE[,BASE...]", "ab: the submission files --submission is timed against (python3 eval.py ab in "
                "one container on one GPU); comma-separated for several"),
    "ab_args": ("ARGS", "ab: more options for python3 eval.py ab, one quoted string (e.g. \"--rounds 30 --mode "
                "benchmark\"); checked before Modal is contacted"),
    "image": ("|".join(IMAGES), "the container image, for every job: leaderboard = the pins of the nvfp4_gemv "
              f"leaderboard's time (CUDA {CUDA_IMAGE.split(':')[1].split('-')[0]}, Python {PYTHON_VERSION}, "
              f"{', '.join(TORCH_PACKAGES)}; default); runner = GPU MODE's Modal runner image now (kernelbot "
              f"4bdd839: CUDA {RUNNER_CUDA_IMAGE.split(':')[1].split('-')[0]}, Python {RUNNER_PYTHON_VERSION}, "
              f"{RUNNER_PIP_STEPS[-1][0]}, {RUNNER_PIP_STEPS[2][0]}); recorded in every result"),
}


def help_text() -> str:
    lines = ["Usage: modal run modal_app.py [OPTIONS]", "",
             "  Run an nvfp4_gemv submission on a Modal GPU under the kit's harness, the server's own",
             "  harness, or both; print eval.py's tables; write the results as JSON. Or (--job) run the",
             "  kit's test suite, kernel benchmark and config sweep there.", "", "Options:"]
    for name, (metavar, text) in OPTION_HELP.items():
        lines.append(f"  --{name.replace('_', '-')} {metavar}")
        lines += textwrap.wrap(text, 96, initial_indent="      ", subsequent_indent="      ",
                               break_on_hyphens=False)
    lines += ["  -h, --help", "      this text", "",
              "Modal's own options (--detach, --env, --profile, ...): `modal run --help`."]
    return "\n".join(lines)


class _OptionError(ValueError):
    """A bench_kernel.py option that does not parse."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _OptionError(message)


def bench_option_parser() -> argparse.ArgumentParser:
    """A parser with bench_kernel.py's options (benchmarks/bench_options.py: importable without
    torch, which the local side need not have) whose errors raise ValueError."""
    from benchmarks.bench_options import build_parser
    return build_parser(lambda **kwargs: _Parser(**kwargs, add_help=False))


def bench_args_problem(flag: str, text: str, root: Path = HERE) -> str | None:
    """Why ``text`` (options for bench_kernel.py, as one string) would not run, or None."""
    try:
        parser = bench_option_parser()
        args = parser.parse_args(shlex.split(text))
    except ValueError as exc:  # shlex's unbalanced quotes, or the parser's error
        return f"error: {flag} {text!r}: {exc} (bench_kernel.py's options: python3 benchmarks/bench_kernel.py --help)"
    taken = [f"--{name}" for name in JOB_SET_OPTIONS if getattr(args, name, None) != parser.get_default(name)]
    if taken:
        return f"error: {flag}: {', '.join(taken)} is set by the job itself"
    grid = getattr(args, "grid", None)
    if grid:
        path = (root / grid).resolve()
        inside = [path.relative_to(d) for d in ((root / d).resolve() for d in JOB_DIRS) if d in path.parents]
        if Path(grid).is_absolute() or not path.is_file() or not inside or "results" in inside[0].parts:
            return (f"error: {flag}: --grid {grid} must be a file of this checkout under "
                    f"{' or '.join(d + '/' for d in JOB_DIRS)} (not results/): what the container gets")
    return None


def gpu_problem(gpu: str) -> str | None:
    kind, colon, count = gpu.partition(":")
    if kind.upper() in MODAL_GPUS and (not colon or (count.isdigit() and int(count) >= 1)):
        return None
    return f"error: --gpu must be a Modal GPU type ({', '.join(MODAL_GPUS)}), optionally with :N; got {gpu!r}"


def against_items(against: str) -> list[str]:
    """--against's comma-separated names or paths."""
    return [item.strip() for item in against.split(",") if item.strip()]


def ab_args_problem(text: str) -> str | None:
    """Why ``text`` (options for eval.py ab, one string) would not run, or None."""
    import ab

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise _OptionError(message)

    parser = ab.build_parser()
    parser.__class__ = Parser
    try:
        args = parser.parse_args(["BASE.py", "NEW.py", *shlex.split(text)])
    except ValueError as exc:
        return f"error: --ab-args {text!r}: {exc} (eval.py ab's options: python3 eval.py ab --help)"
    if args.files != ["BASE.py", "NEW.py"]:
        return "error: --ab-args: the files come from --submission and --against, not --ab-args"
    taken = [f"--{name.replace('_', '-')}" for name in AB_SET_OPTIONS if getattr(args, name) not in (None, False)]
    if taken:
        return f"error: --ab-args: {', '.join(taken)} is set by the job itself"
    return None


def ab_problem(submission: str, against: str, ab_args: str) -> str | None:
    """--job ab's arguments: the submission a file, --against one or more files, --ab-args
    eval.py ab's options; then the files' upload rules and pre-check (the slow part: KernelGuard
    reads each file for a second or two), so that a wrong argument is named at once."""
    files = [submission, *against_items(against)]
    for item in files:
        problem = kit_harness.submission_problem(Path(item))
        if problem:
            return f"error: {problem}"
    if not against_items(against):
        return "error: --job ab needs --against BASE[,BASE...]: the submission files to time --submission against"
    problem = ab_args_problem(ab_args) if ab_args.strip() else None
    for item in files:
        problem = problem or upload_problem(item)
    return problem


def upload_problem(path: str) -> str | None:
    """The server's upload rules (``harness.static_problems``: empty, size, UTF-8, the forbidden
    word) for an existing file, then its pre-check where KernelGuard is installed here
    (``harness.kernelguard_precheck``): one line naming the file and every rule it breaks, or
    the rules KernelGuard matched where it would reject the file; None when neither stops it."""
    problems = kit_harness.static_problems(Path(path))
    if problems:
        return f"error: {path} breaks the server's upload rules, so nothing is sent: " + "; ".join(problems)
    found = kit_harness.precheck_file(path)
    if found.rejected:
        return f"error: {path}: the server's pre-check would refuse it, so nothing is sent: {found.summary()}"
    return None


def check_args(submission: str, mode: str, harness: str, runs, job: str = "eval", gpu: str = DEFAULT_GPU,
               bench_args: str = "", sweep_args: str = "", harness_date: str = kit_harness.HARNESS_DATE,
               against: str = "", ab_args: str = "", image: str = DEFAULT_IMAGE) -> str | None:
    """The first argument error (a message), or None. ``runs`` may be the raw text. The files a job
    sends (eval: --submission; ab: --submission and each --against) must keep the upload rules."""
    for flag, value, choices in (("--job", job, JOBS), ("--mode", mode, MODES), ("--harness", harness, HARNESSES),
                                 ("--harness-date", harness_date, kit_harness.HARNESS_DATES),
                                 ("--image", image, IMAGES)):
        if value not in choices:
            return f"error: {flag} must be one of {', '.join(choices)}, got {value!r}"
    try:
        n = int(runs)
    except (TypeError, ValueError):
        return f"error: --runs must be a whole number (at least 1), got {runs!r}"
    if n < 1:
        return f"error: --runs must be at least 1, got {n}"
    problem = gpu_problem(gpu)
    if not problem and job == "eval" and "kernelbot" in harness_plan(harness) and harness_date != KERNELBOT_DATE:
        problem = (f"error: --harness {harness} --harness-date {harness_date}: KernelBot's harness runs the server's "
                   f"task at {SERVER_COMMITS[KERNELBOT_DATE][:7]} ({KERNELBOT_DATE}) only; drop --harness-date, or "
                   "pick kit, server or both")
    for flag, text in (("--bench-args", bench_args), ("--sweep-args", sweep_args)):
        problem = problem or (bench_args_problem(flag, text) if text.strip() else None)
    if problem:
        return problem
    if job == "ab":
        return ab_problem(submission, against, ab_args)
    if job == "eval":
        problem = kit_harness.submission_problem(Path(submission))
        return f"error: {problem}" if problem else upload_problem(submission)
    return None


def gpu_warning(harness: str, gpu: str) -> str | None:
    if {"server", "kernelbot"} & set(harness_plan(harness)) and "B200" not in gpu.upper():
        return (f"warning: --gpu {gpu}: the server's reference.py computes the expected output with FP4 "
                "torch._scaled_mm, which runs only on a B200 (compute capability 10.x); its cases will fail")
    return None


def _fail(message: str, code: int = 2):
    print(message, file=sys.stderr)
    raise SystemExit(code)


@app.local_entrypoint()
def main(job: Literal[JOBS] = "eval", submission: str = "submission.py", mode: Literal[MODES] = "all",
         harness: Literal[HARNESSES] = "kit", harness_date: str = kit_harness.HARNESS_DATE, runs: int = 1,
         gpu: str = DEFAULT_GPU, out: str = "", bench_args: str = "", sweep_args: str = "", against: str = "",
         ab_args: str = "", image: Literal[IMAGES] = DEFAULT_IMAGE):
    """The local side: check the arguments, run the harnesses (or the job's steps) remotely,
    print and save."""
    problem = check_args(submission, mode, harness, runs, job, gpu, bench_args, sweep_args, harness_date, against,
                         ab_args, image)
    if problem:
        _fail(problem)
    if image != IMAGE_KIND:  # the functions are defined on the image `modal run`'s --image selected
        _fail(f"error: --image {image}: this module defined its functions on the {IMAGE_KIND} image "
              f"(modal run modal_app.py --image {image} selects that one)")
    for item in [submission, *against_items(against)] if job in ("eval", "ab") else []:
        for line in kit_harness.header_warnings(Path(item)):
            print(f"warning: {item}: {line}", file=sys.stderr)
    if job == "ab":
        code = run_ab(submission, against, gpu, out, ab_args, image)
        if code:
            raise SystemExit(code)
        return
    if job != "eval":
        code = run_jobs(job, gpu, out, bench_args, sweep_args, image)
        if code:
            raise SystemExit(code)
        return
    warning = gpu_warning(harness, gpu)
    if warning:
        print(warning, file=sys.stderr)
    path = Path(submission)
    fn = run_remote if gpu == DEFAULT_GPU else run_remote.with_options(gpu=gpu)
    print(f"running {path} on Modal ({gpu}, image {image}), harness {harness} of {harness_date}, mode {mode}, "
          f"runs {runs} ...", file=sys.stderr)
    try:
        results = fn.remote(path.read_text(), mode, runs, None, None, harness_plan(harness), harness_date)
    except modal.exception.AuthError:
        _fail(NO_TOKEN)
    except Exception as exc:  # the container failed: image build, timeout, GPU unavailable...
        _fail(f"error: the remote run failed: {type(exc).__name__}: {exc}", 1)
    passed = all(r["passed"] for r in results)
    flag_impossible_times(results)
    print("\n\n".join(report(r) for r in results))
    if len(results) > 1:
        print("\n" + comparison(results))
    print("PASS" if passed else "FAIL")
    record = {"gpu_requested": gpu, "image_requested": image, "image_pins": image_summary(image),
              "submission": str(path), "mode": mode, "runs": runs, "harness": harness,
              "harness_date": harness_date, "passed": passed, "results": results}
    dest = Path(out) if out else default_out(gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=2) + "\n")
    print(f"results written to {dest}", file=sys.stderr)
    if not passed:
        raise SystemExit(1)


# ----------------------------------------------------------------------------- preflight
# `modal run` connects (and builds the image) before it calls main(), so what a user can fix
# locally is reported here, at import, when `modal run` loads this module: --help (modal's
# own help of main() has no descriptions), argument errors, then a missing token.

def _unknown_option(argv: list[str], known: set) -> str:
    """The first option after the app reference (modal_app.py, modal_app.py::main) that ``main``
    does not take, or ''. Every option of ``main`` takes a value, which is skipped."""
    at = next((i for i, a in enumerate(argv) if a.split("::")[0].endswith("modal_app.py")), None)
    if at is None:
        return ""
    rest, i = argv[at + 1:], 0
    while i < len(rest):
        arg = rest[i]
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            if name not in known:
                return name
            i += 1 if "=" in arg else 2
        else:
            i += 1
    return ""


def modal_unreachable(timeout: float = 10) -> str | None:
    """Why Modal's server cannot be reached from here (one line), or None: a TCP connection
    to it (without one `modal run` retries for about a minute, then prints a traceback)."""
    from modal.config import config

    url = urllib.parse.urlsplit((config.get("server_url") or "https://api.modal.com").split(",")[0].strip())
    host, port = url.hostname or "api.modal.com", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        return f"error: cannot reach Modal at {host}:{port} ({why}): check the network connection"
    return None


def preflight(argv: list[str]) -> tuple[int, str] | None:
    """(exit status, text) if ``modal run modal_app.py ARGS`` should stop before Modal is
    contacted (status 0: the help text, for stdout), else None: a bad argument, no token, no
    connection to Modal."""
    if any(a in ("-h", "--help") for a in argv):
        return 0, help_text()
    defaults = {name: p.default for name, p in inspect.signature(main.info.raw_f).parameters.items()}
    unknown = _unknown_option(argv, {"--" + name.replace("_", "-") for name in defaults})
    if unknown:
        return 2, (f"error: no option {unknown} (the options: "
                   + ", ".join("--" + n.replace("_", "-") for n in defaults) + "; modal run modal_app.py --help)")
    args = {name: _flag(argv, "--" + name.replace("_", "-"), str(defaults[name])) for name in defaults}
    if sum(a == "--against" or a.startswith("--against=") for a in argv) > 1:
        return 2, "error: --against given more than once: give several as one comma-separated value (--against A,B)"
    problem = check_args(args["submission"], args["mode"], args["harness"], args["runs"], args["job"], args["gpu"],
                         args["bench_args"], args["sweep_args"], args["harness_date"], args["against"],
                         args["ab_args"], args["image"])
    if problem:
        return 2, problem
    if not _has_token() and _flag(argv, "--profile", "") == "":  # another profile: modal checks
        return 2, NO_TOKEN
    unreachable = modal_unreachable()
    if unreachable:
        return 2, unreachable
    return None


if __name__ != "__main__" and _loaded_by_modal_run():
    _stop = preflight(sys.argv[2:])
    if _stop:
        print(_stop[1], file=sys.stdout if _stop[0] == 0 else sys.stderr)
        raise SystemExit(_stop[0])
elif __name__ == "__main__":  # `python modal_app.py`: this file is run by Modal's command line
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print("modal_app.py runs under Modal's command line: modal run modal_app.py [OPTIONS]; "
              "every option: modal run modal_app.py --help")
        raise SystemExit(0)
    print(f"error: this file runs through Modal: modal run modal_app.py {shlex.join(sys.argv[1:])}".rstrip()
          + " (modal run modal_app.py --help lists the options)", file=sys.stderr)
    raise SystemExit(2)
