"""The compiled-kernel cache: a kernel calling kernels of another file must not keep their old code."""

from __future__ import annotations

from pathlib import Path

from allocator.jit import forget_when_changed


def test_a_callee_edit_drops_the_callers_cache(tmp_path: Path) -> None:
    caller, callee = tmp_path / "caller.py", tmp_path / "callee.py"
    caller.write_text("# calls callee's kernels\n")
    callee.write_text("v = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    cached = [cache / "caller.fn-10.py311.nbi", cache / "caller.fn-10.py311.1.nbc"]
    other = cache / "callee.fn-3.py311.nbi"  # the callee's own cache: numba checks it against its file
    for f in [*cached, other]:
        f.write_text("machine code")

    forget_when_changed(str(caller), str(callee))  # no stamp yet: what was cached may predate the callee
    assert not any(f.exists() for f in cached) and other.exists()

    for f in cached:
        f.write_text("machine code")
    forget_when_changed(str(caller), str(callee))  # unchanged: kept
    assert all(f.exists() for f in cached)

    callee.write_text("v = 2\n")
    forget_when_changed(str(caller), str(callee))
    assert not any(f.exists() for f in cached) and other.exists()


def test_a_tree_without_a_cache_directory_gets_one(tmp_path: Path) -> None:
    caller, callee = tmp_path / "caller.py", tmp_path / "callee.py"
    caller.write_text("")
    callee.write_text("")
    forget_when_changed(str(caller), str(callee))
    assert (tmp_path / "__pycache__" / "caller.callees").is_file()
