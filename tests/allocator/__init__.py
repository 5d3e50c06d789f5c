"""Tests of the allocator (ARCHITECTURE.md §Clearing).

pytest (prepend import mode) puts tests/ on sys.path, where this directory would shadow the real ``allocator``
package, which the editable install serves from a meta-path finder consulted after sys.path. So when this file
is imported as the top-level ``allocator``, it loads the real package in its place and lets the test modules
here be found as its submodules. Remove this once pyproject sets ``pythonpath = ["."]`` for pytest.
"""

import importlib.util
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
_real = _here.parents[1] / "allocator"
if __name__ == "allocator" and _real != _here:
    _spec = importlib.util.spec_from_file_location(
        "allocator", _real / "__init__.py", submodule_search_locations=[str(_real), str(_here)]
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["allocator"] = _module
    _spec.loader.exec_module(_module)
