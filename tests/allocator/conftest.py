"""Keep ``import allocator`` pointing at the real package when pytest runs without its Django plugin.

pytest puts tests/ on sys.path (tests/conftest.py has no package), where this directory, having no __init__.py,
is a namespace-package candidate named ``allocator``; the editable install serves the real package from a
meta-path finder consulted only after sys.path, so without Django (which imports the real package first) the
empty namespace would win. The repository root on sys.path makes the real package win. (``pythonpath = ["."]``
in pyproject's pytest options would do this for every suite.)
"""

import sys
from pathlib import Path

_root = str(Path(__file__).resolve().parents[2])
if _root not in sys.path:
    sys.path.insert(0, _root)
if getattr(sys.modules.get("allocator"), "__file__", "") is None:  # the namespace stand-in was imported
    for _name in [m for m in sys.modules if m == "allocator" or m.startswith("allocator.")]:
        del sys.modules[_name]
