"""Pinned git repositories: a checkout at exactly its commit, and a folder of mirrors to take
them from without the network.

`checkout` clones a repository into the workload folder and checks out its commit (detached);
the clone is made under a hidden temporary name and renamed only once `git rev-parse HEAD`
equals the commit, so an interrupted or refused clone leaves nothing. A checkout already there
is kept when its HEAD is the commit and refused otherwise: setup never replaces a folder that
may hold someone's work. `mirror` keeps a bare mirror (`<name>.git`) holding the commit, for an
LLMB_SOURCES folder. `pip_install` installs a checkout into a venv as a git requirement at the
commit, which pip records (direct_url.json), so that a rerun can tell it is already there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from llmb.shared.errors import LlmbError


class GitError(LlmbError):
    """A repository that cannot be had at its commit; str(error) is one line with the fix."""


@dataclass(frozen=True)
class Repo:
    """One entry of a recipe's `repositories` (for the install's GPU type)."""

    key: str  # megatron_bridge
    url: str  # https://github.com/NVIDIA-NeMo/Megatron-Bridge.git
    commit: str  # 40 hex digits

    @property
    def name(self) -> str:
        """The folder it is cloned into, and its mirror's name without .git: Megatron-Bridge."""
        return self.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")


REFILL = ("fill it again on a machine with network: common/setup.sh --fetch-sources DIR "
          "<recipe>...")


def _git(args: list[str], what: str) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, env=env,
                              check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise GitError("git is not installed; install git (setup clones the recipe's pinned "
                       "repositories)") from None
    if done.returncode:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise GitError(f"{what} failed: {lines[-1].strip() if lines else done.returncode}")
    return done.stdout.strip()


def has_commit(git_dir: Path, commit: str) -> bool:
    try:
        _git(["--git-dir", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"], "")
    except GitError:
        return False
    return True


def head(work_tree: Path) -> str | None:
    try:
        return _git(["-C", str(work_tree), "rev-parse", "--verify", "HEAD"], "")
    except GitError:
        return None


def origin(repo: Repo, sources: Path | None) -> str:
    """Where to clone from: the repository's url, or its mirror in an LLMB_SOURCES folder
    (<name>.git, a bare mirror, or <name>, a clone)."""
    if sources is None:
        return repo.url
    for candidate in (sources / f"{repo.name}.git", sources / repo.name):
        if candidate.is_dir():
            return str(candidate)
    raise GitError(f"LLMB_SOURCES={sources} has neither {repo.name}.git nor {repo.name} (the "
                   f"repository {repo.url}); {REFILL}")


def checkout(repo: Repo, dest: Path, source: str, where: str) -> str:
    """dest checked out at repo.commit, cloned from source; "kept" or "cloned"."""
    if dest.is_symlink() or dest.exists():
        found = head(dest) if (dest / ".git").exists() else None
        if found is None:
            raise GitError(f"{dest} exists and is not a git checkout of {repo.url}; move it "
                           f"away and run setup again (it clones {repo.commit} there)")
        if found != repo.commit:
            raise GitError(
                f"{dest} is checked out at {found}, not {where}.commit {repo.commit}; check out "
                f"{repo.commit} there (git -C {dest} checkout {repo.commit}) or move it away "
                "and run setup again")
        return "kept"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _git(["clone", "--quiet", "--no-checkout", "--", source, str(tmp)],
             f"git clone {source}")
        _need_commit(repo, tmp / ".git", source, where)
        _git(["-C", str(tmp), "-c", "advice.detachedHead=false", "checkout", "--quiet",
              "--detach", repo.commit], f"git checkout {repo.commit}")
        found = head(tmp)
        if found != repo.commit:
            raise GitError(f"{where}: the checkout of {source} is at {found}, not "
                           f"{repo.commit}; check the commit in the recipe's metadata.yaml")
        if source != repo.url:
            _git(["-C", str(tmp), "remote", "set-url", "origin", repo.url], "git remote set-url")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return "cloned"


def _need_commit(repo: Repo, git_dir: Path, source: str, where: str) -> None:
    """The commit is in git_dir, fetched by its id if no branch holds it; else GitError."""
    if has_commit(git_dir, repo.commit):
        return
    # GitHub serves a commit no branch or tag reaches when it is asked for by id.
    with contextlib.suppress(GitError):
        _git(["--git-dir", str(git_dir), "fetch", "--quiet", "origin", repo.commit], "")
    if not has_commit(git_dir, repo.commit):
        fix = (REFILL if source != repo.url else
               f"check {where}.commit in the recipe's metadata.yaml: it must be a full commit "
               f"id of {repo.url}")
        raise GitError(f"{where}: commit {repo.commit} is not in {source}; {fix}")


def mirror(repo: Repo, folder: Path, where: str) -> str:
    """folder/<name>.git, a bare mirror of repo.url holding repo.commit; "kept", "updated" or
    "cloned"."""
    target = folder / f"{repo.name}.git"
    if target.exists():
        url = _git(["--git-dir", str(target), "config", "--get", "remote.origin.url"],
                   f"reading the origin of {target}")
        if url != repo.url:
            raise GitError(f"{target} mirrors {url}, not {repo.url} ({where}); two repositories "
                           "with one name cannot share a sources folder: use another folder")
        if has_commit(target, repo.commit):
            return "kept"
        _git(["--git-dir", str(target), "remote", "update", "--prune"], f"git fetch {repo.url}")
        _need_commit(repo, target, repo.url, where)
        return "updated"
    tmp = folder / f".{repo.name}.git.partial.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _git(["clone", "--quiet", "--mirror", "--", repo.url, str(tmp)],
             f"git clone {repo.url}")
        _need_commit(repo, tmp, repo.url, where)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return "cloned"


def installed_commit(python: str, distribution: str) -> str | None:
    """The commit pip recorded for a distribution installed from git in that Python, or None."""
    probe = ("import importlib.metadata as m, sys\n"
             "try:\n    print(m.distribution(sys.argv[1]).read_text('direct_url.json') or '')\n"
             "except m.PackageNotFoundError:\n    pass\n")
    done = subprocess.run([python, "-c", probe, distribution], capture_output=True, text=True,
                          check=False)
    try:
        record = json.loads(done.stdout or "{}")
    except ValueError:
        return None
    commit = record.get("vcs_info", {}).get("commit_id") if isinstance(record, dict) else None
    return commit if isinstance(commit, str) else None


def pip_install(python: str, distribution: str, checkout_dir: Path, repo: Repo,
                pip_args: list[str]) -> str:
    """The checkout at repo.commit installed into python's environment; "kept" or
    "installed"."""
    if installed_commit(python, distribution) == repo.commit:
        return "kept"
    requirement = f"git+file://{checkout_dir}@{repo.commit}"
    done = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                           *pip_args, requirement], check=False)
    if done.returncode:
        raise GitError(f"pip install {distribution} from {checkout_dir} at {repo.commit} failed "
                       "(pip's output is above); without network, give pip its build "
                       "requirements with LLMB_PIP_ARGS (e.g. --no-index --find-links DIR)")
    if installed_commit(python, distribution) != repo.commit:
        raise GitError(f"pip installed {distribution}, but {python} does not report it at "
                       f"{repo.commit}; is VIRTUAL_ENV the venv setup installs into?")
    return "installed"
