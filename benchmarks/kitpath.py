"""The one ``sys.path`` edit of the scripts in this folder. Run as ``python3 benchmarks/NAME.py``,
a script has this folder, not the kit's root, first on ``sys.path``; it imports this module
first (``if not __package__: import kitpath``), which puts the root there, so that the kit's
modules (harness, submission, reference, ...) and this folder's as ``benchmarks.NAME`` import.
Imported as part of the package (``python3 -m benchmarks.NAME``, the tests), a script finds the
root on the path already and skips this."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
