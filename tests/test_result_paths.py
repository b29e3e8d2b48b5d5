"""The logs under benchmarks/results/ name no folder of the machine that measured them, and the kit's
tools that write paths into logs and records name those inside the repository from its root."""

import json
import re
import subprocess

from conftest import ROOT

from benchmarks import ab_calibration as cal

RESULTS = ROOT / "benchmarks" / "results"
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:root|work|home|Users)/")


def test_the_logs_name_no_folder_of_the_measuring_machine():
    logs = sorted(RESULTS.glob("*.log"))
    assert logs
    found = [f"{log.name}:{n}: {line.strip()[:100]}" for log in logs
             for n, line in enumerate(log.read_text().splitlines(), 1) if MACHINE_PATH.search(line)]
    assert found == []


def test_repo_path_is_relative_inside_the_repository_and_absolute_outside(tmp_path):
    assert cal.repo_path(ROOT / "submission.py") == "submission.py"
    assert cal.repo_path(ROOT / "benchmarks" / "x" / ".." / "results") == "benchmarks/results"
    assert cal.repo_path(tmp_path / "aa.json") == str((tmp_path / "aa.json").resolve())


def test_the_calibration_hands_eval_py_ab_repository_paths(tmp_path, monkeypatch, capsys):
    """run_ab's command (echoed to the log) and so ab's record name the kit's files from the root."""
    seen = []

    def fake_run(cmd, cwd=None):
        seen.append((cmd, cwd))
        (cwd / cmd[cmd.index("--json") + 1]).write_text(json.dumps({"ok": True}))  # an absolute path stays one
        return subprocess.CompletedProcess(cmd, 0)

    class Args:
        shapes, repeats = "benchmarks", 20

    monkeypatch.setattr(cal.subprocess, "run", fake_run)
    record = cal.run_ab([ROOT / "submission.py", tmp_path / "copy.py"], tmp_path / "aa.json", Args, 2, 2, 10.0)
    assert record == {"ok": True}
    (cmd, cwd), = seen
    assert cwd == cal.ROOT
    assert cmd[1:5] == ["eval.py", "ab", "submission.py", str((tmp_path / "copy.py").resolve())]
    echoed = capsys.readouterr().err
    assert "+ eval.py ab submission.py " in echoed and str(ROOT) + "/" not in echoed
