"""The suite does not depend on the order of its tests: a test that loads the kit's submission
anew under the name ``submission`` leaves ``sys.modules`` as it found it (conftest's
``_kit_modules_as_found``). The two tests below run in this order."""

import sys
from pathlib import Path

import submission
from benchmarks import compile_table

ROOT = Path(__file__).resolve().parent.parent


def test_loading_the_submission_anew_replaces_the_module_for_this_test_only():
    fresh = compile_table.load_submission(ROOT / "submission.py")
    assert sys.modules["submission"] is fresh is not submission


def test_the_next_test_finds_the_module_its_file_imported():
    assert sys.modules["submission"] is submission
