"""The sandbox's non-root path in the normal suite: bwrap.py takes different paths for a root and a
non-root evaluator, and CI runs only as root. As root, the three sandbox test files run again as
uid/gid 65534 (no supplementary groups) in a private mount namespace (`enter_command`: a non-root
user may not reach an interpreter, venv or checkout under a 0700 directory, such as pyenv in root's
home or a clone in a mkdtemp folder); as non-root, the main run already is that path.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

NOBODY = 65534
REPO = Path(__file__).resolve().parents[1]
SANDBOX_TESTS = ("tests/test_eval_sandbox.py", "tests/test_eval_sandbox_hostile.py", "tests/test_eval_sandbox_benign.py")


def _reachable(st: os.stat_result, bits: int, uid: int, gid: int) -> bool:
    """Whether `uid`/`gid` (no other groups) has permission `bits` (a mask of r=4, w=2, x=1)
    on a file with stat `st`: the owner's bits for its owner, else the group's, else others'."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & bits == bits


def covers(needed: Iterable[str | os.PathLike[str]], uid: int = NOBODY,
           gid: int = NOBODY) -> list[tuple[str, tuple[str, ...]]]:
    """What to cover so `uid`/`gid` can reach every directory in `needed` and read its entries.

    Each item is (a directory, the entries of it to bind back), shallowest first: an ancestor
    that `uid` cannot traverse keeps only the child on the way to each needed directory; a needed
    directory that it cannot list or traverse keeps all its entries. Paths are resolved first
    (symlinked components), so pass the directory holding a symlink as well as its target.
    """
    keep: dict[str, set[str]] = {}
    for path in sorted({os.path.realpath(p) for p in needed}):
        if not os.path.isdir(path):
            continue
        parts = Path(path).parts
        for depth in range(2, len(parts)):  # "/" itself cannot be covered (nor need it be)
            ancestor = os.path.join(*parts[:depth])
            if not _reachable(os.stat(ancestor), 1, uid, gid):
                keep.setdefault(ancestor, set()).add(os.path.join(ancestor, parts[depth]))
        if path != "/" and not _reachable(os.stat(path), 5, uid, gid):
            keep.setdefault(path, set()).update(os.path.join(path, name) for name in os.listdir(path))
    return [(d, tuple(sorted(keep[d]))) for d in sorted(keep, key=lambda d: (d.count("/"), d))]


def needed_paths() -> list[str]:
    """What an evaluator run from this checkout reads: the interpreter's real install, the venv,
    every import path, the checkout and the package (installed editable or not), and bwrap."""
    import numloss
    from numloss.evaluate.sandbox import bwrap

    paths = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.abspath(sys.executable)),
             os.path.dirname(os.path.realpath(sys.executable)), str(REPO), os.path.dirname(numloss.__file__)]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    paths += [os.path.dirname(p) for p in bwrap.bwrap_candidates()]
    return paths


def enter_command(needed: Iterable[str], command: list[str], cwd: str, uid: int = NOBODY,
                  gid: int = NOBODY) -> list[str]:
    """The command line that runs `command` as `uid`/`gid` (no supplementary groups) in `cwd`, in a
    private mount namespace (bwrap's, run as root) where every directory in `needed` is reachable:
    each directory `covers` names gets a tmpfs (mode 755) with only its needed entries bound back
    from the host, whose files and modes are never changed."""
    from numloss.evaluate.sandbox import bwrap

    cmd = [bwrap.bwrap_candidates()[0], "--dev-bind", "/", "/", "--cap-add", "ALL"]
    for directory, entries in covers(needed, uid, gid):
        cmd += ["--tmpfs", directory]
        for entry in entries:
            cmd += ["--symlink", os.readlink(entry), entry] if os.path.islink(entry) else ["--dev-bind", entry, entry]
    # the chdir after setuid: it fails there, plainly, when the checkout is unreachable
    become = (f"import os, sys\nos.setgroups([])\nos.setgid({gid})\nos.setuid({uid})\nos.chdir({cwd!r})\n"
              "os.execvp(sys.argv[1], sys.argv[1:])")
    return cmd + ["--", sys.executable, "-I", "-c", become, *command]


# ---- tests ----------------------------------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="only root can enter a mount namespace and become 65534")
def test_enter_reaches_a_checkout_under_0700_folders_and_leaves_the_host_alone(tmp_path):
    """A checkout in a 0700 folder, below a 0755 one, below a 0700 one: `covers` keeps only what is
    on the way in the 0700 ones above it (tmp_path's included) and every entry of the checkout."""
    locked = tmp_path / "locked"
    repo = locked / "pub" / "repo"
    for d in (repo / "src" / "pkg", repo / "tests", locked / "other"):
        d.mkdir(parents=True)
    (repo / "src" / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (repo / ".hidden").write_text("h")
    (repo / "link").symlink_to("src")
    (locked / "secret.txt").write_text("secret")
    for d, mode in ((locked, 0o700), (locked / "pub", 0o755), (repo, 0o700)):
        d.chmod(mode)
    before = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    check = ("import os, sys\n"
             "sys.path.insert(0, 'src'); import pkg\n"
             "print(os.getuid(), os.getgid(), os.getgroups(), pkg.VALUE, sorted(os.listdir('.')),"
             f" os.path.exists({str(locked / 'secret.txt')!r}), sorted(os.listdir({str(locked)!r})))")
    done = subprocess.run(enter_command([*needed_paths(), str(repo)], [sys.executable, "-I", "-c", check], str(repo)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["65534", "65534", "[]", "42", "['.hidden',", "'link',", "'src',", "'tests']",
                                   "False", "['pub']"]
    # on the host: nothing mounted, nothing of the tree changed
    assert Path("/proc/self/mountinfo").read_text(encoding="utf-8") == before
    assert stat.S_IMODE(locked.stat().st_mode) == 0o700 and stat.S_IMODE(repo.stat().st_mode) == 0o700
    assert sorted(os.listdir(locked)) == ["other", "pub", "secret.txt"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="this run is the non-root evaluator: test_eval_sandbox checks its uids")
def test_sandbox_suites_as_a_non_root_evaluator():
    """The sandbox files pass as uid 65534 (as non-root, a root branch of bwrap.py would fail them:
    test_kernel_isolation_works_on_this_machine, and the host uids of
    test_two_evaluators_never_share_a_host_uid_... are the evaluator's own)."""
    from numloss.evaluate.sandbox import isolation

    if (iso := isolation()).mode != "bwrap+seccomp":
        pytest.skip("kernel sandbox unavailable: " + iso.detail)
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SANDBOX_TESTS]
    # a HOME and TMPDIR that uid/gid 65534 owns; short, in the temp dir rather than tmp_path: the
    # hostile suite binds unix sockets below it (108 bytes at most for a path)
    with tempfile.TemporaryDirectory(prefix="numloss-nonroot-") as parent:
        home = Path(parent) / "home"
        home.mkdir()
        os.chown(home, NOBODY, NOBODY)
        env = {**os.environ, "HOME": str(home), "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(enter_command([*needed_paths(), str(home)], pytest_cmd, str(REPO)), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3000)
    # the first error lines (a fixture's error is otherwise repeated past the tail) and the tail
    first = "\n".join([line for line in done.stdout.splitlines() if line.startswith("E ")][:15])
    shown = f"exit status {done.returncode}; first errors:\n{first}\n...\n{done.stdout[-4000:]}"
    assert done.returncode == 0, shown  # no test failed nor erred
    assert re.search(r"\b[1-9]\d* passed\b", done.stdout.strip().splitlines()[-1]), shown  # not all skipped
