"""llmb.install.sources and llmb.install.gitrepos: a Megatron-Bridge recipe's pinned
repositories cloned at exactly their commits (kept on a rerun, a wrong checkout or a missing
commit refused in one line), the GPU type's overrides, an LLMB_SOURCES folder filled by `fill`
and used without the network, NeMo-Run pip-installed into a real venv at its commit. Every
repository is a real git repository built in a temporary folder; nothing reaches the network."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sourcesworld
from llmb.install import gitrepos, hfcache, sources
from llmb.install.gitrepos import GitError, Repo
from llmb.install.sources import SourcesError
from sourcesworld import REPO_ID, World, git

TOKEN = "hf_SourcesTestToken0123456789abcdefgh"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return sourcesworld.build(tmp_path / "world")


def bridge(world: World) -> Repo:
    return sources.resolve(world.recipe).repos[0]


def variant(world: World, tmp_path: Path, name: str, update: dict[str, object]) -> Path:
    """A copy of the world's recipe in a new folder, with these top-level fields changed."""
    folder = tmp_path / name
    shutil.copytree(world.recipe, folder)
    sourcesworld.set_field(folder, update)
    return folder


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment without a token or a sources folder unless given."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("HF_TOKEN", "LLMB_SOURCES", "HF_ENDPOINT", "LLMB_PIP_ARGS")}
    return {**base, "LLMB_INSTALL": str(tmp_path / "install"), **extra}


# --- the recipe's fields ----------------------------------------------------------------------

def test_the_gpu_types_overrides_replace_the_image_and_that_repository_only(world: World):
    base, b200 = sources.resolve(world.recipe, "h100"), sources.resolve(world.recipe, "b200")
    assert base.framework == "megatron-bridge" and base.workload == "pretrain_bridgetest"
    assert base.image.file_name == "nvidia+nemo+26.06.01.sqsh"
    assert b200.image.file_name == "nvidia+nemo+26.04.01.sqsh"
    assert [(r.key, r.name, r.commit) for r in base.repos] == [
        ("megatron_bridge", "Megatron-Bridge", world.mb_commit),
        ("nemo_run", "Run", world.run_commits[0])]
    assert [r.commit for r in b200.repos] == [world.b200_commit, world.run_commits[0]]
    assert base.hf == (sources.HfConfig(REPO_ID, "main"),)
    assert sources.facts_lines(b200, "b200") == [
        "pretrain_bridgetest", "megatron-bridge", "docker://nvcr.io#nvidia/nemo:26.04.01",
        "nvidia+nemo+26.04.01.sqsh", "x86_64", "30"]


def test_a_25_04_recipe_has_nothing_to_fetch(tmp_path: Path):
    llama = sources.resolve(sources.catalog.REPO_ROOT / "llama3.1", "gb200")
    assert (llama.repos, llama.hf, llama.framework) == ((), (), "nemo")
    sources.prepare(llama, tmp_path / "i", {"LLMB_SOURCES": "/nowhere"}, None, io.StringIO())
    assert not (tmp_path / "i").exists()
    assert sources.facts_lines(llama, "gb200")[2:5] == [
        "docker://nvcr.io#nvidia/nemo:25.04.01", "nvidia+nemo+25.04.01.sqsh", "aarch64"]


@pytest.mark.parametrize(("update", "message"), [
    ({"repositories": {"megatron_bridge": {"url": "https://x/Megatron-Bridge.git",
                                           "commit": "main"}}},
     "repositories.megatron_bridge.commit=main is not allowed (a full 40-digit commit id"),
    ({"repositories": {"megatron_bridge": {"url": "--upload-pack=touch /tmp/x",
                                           "commit": "a" * 40}}},
     "repositories.megatron_bridge.url=--upload-pack=touch /tmp/x is not allowed (a git URL"),
    ({"repositories": {"megatron_bridge": {"url": "-uX", "commit": "a" * 40}}},
     "repositories.megatron_bridge.url=-uX is not allowed (a git URL without spaces or quotes, "
     "not starting with -)"),
    ({"repositories": {"megatron_bridge": {"url": "https://x/M.git"}}},
     "repositories.megatron_bridge: give both url and commit"),
    ({"repositories": {"a": {"url": "https://x/Run.git", "commit": "a" * 40},
                       "b": {"url": "https://y/Run", "commit": "b" * 40}}},
     "repositories: two repositories are named Run"),
    ({"downloads": {"huggingface": [{"repo_id": "org/m", "assets": ["tokenizer"]}]}},
     "downloads.huggingface[0].assets=['tokenizer'] is not supported; allowed: config"),
    ({"downloads": {"huggingface": [{"repo_id": "../etc"}]}},
     "downloads.huggingface[0].repo_id=../etc is not allowed (org/name)"),
])  # (gpu_overrides' GPU types and keys: the catalog's, tests/recipes/test_bridge_catalog.py)
def test_a_wrong_setup_field_is_one_line_naming_it(world: World, tmp_path: Path,
                                                    update: dict[str, object], message: str):
    folder = variant(world, tmp_path, "bad", update)
    with pytest.raises(SourcesError) as err:
        sources.resolve(folder, "b200")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(folder / "metadata.yaml") in str(err.value)


# --- checkouts --------------------------------------------------------------------------------

def test_clones_at_exactly_the_commit_and_a_rerun_keeps_it(world: World, tmp_path: Path):
    repo, dest = bridge(world), tmp_path / "w" / "Megatron-Bridge"
    assert gitrepos.checkout(repo, dest, repo.url, "repositories.megatron_bridge") == "cloned"
    assert git("rev-parse", "HEAD", cwd=dest) == world.mb_commit != world.mb_commits[-1]
    assert (dest / "README.md").read_text() == "bridge 1\n"
    inode = dest.stat().st_ino
    assert gitrepos.checkout(repo, dest, repo.url, "repositories.megatron_bridge") == "kept"
    assert dest.stat().st_ino == inode and git("rev-parse", "HEAD", cwd=dest) == world.mb_commit
    assert [p.name for p in dest.parent.iterdir()] == ["Megatron-Bridge"]  # no partial left


def test_a_checkout_at_another_commit_is_refused_never_replaced(world: World, tmp_path: Path):
    repo, dest = bridge(world), tmp_path / "w" / "Megatron-Bridge"
    gitrepos.checkout(repo, dest, repo.url, "repositories.megatron_bridge")
    git("checkout", "-q", world.mb_commits[-1], cwd=dest)
    (dest / "mine.txt").write_text("someone's work\n")
    with pytest.raises(GitError) as err:
        gitrepos.checkout(repo, dest, repo.url, "repositories.megatron_bridge")
    assert str(err.value) == (
        f"{dest} is checked out at {world.mb_commits[-1]}, not repositories.megatron_bridge."
        f"commit {world.mb_commit}; check out {world.mb_commit} there (git -C {dest} checkout "
        f"{world.mb_commit}) or move it away and run setup again")
    assert (dest / "mine.txt").exists()
    assert git("rev-parse", "HEAD", cwd=dest) == world.mb_commits[-1]


def test_a_folder_that_is_no_checkout_is_refused(world: World, tmp_path: Path):
    dest = tmp_path / "Megatron-Bridge"
    dest.mkdir()
    with pytest.raises(GitError, match=r"exists and is not a git checkout of .*move it away"):
        gitrepos.checkout(bridge(world), dest, bridge(world).url, "repositories.x")


def test_a_commit_the_repository_lacks_is_refused_and_leaves_nothing(world: World,
                                                                      tmp_path: Path):
    repo = Repo("megatron_bridge", bridge(world).url, "f" * 40)
    dest = tmp_path / "w" / "Megatron-Bridge"
    with pytest.raises(GitError) as err:
        gitrepos.checkout(repo, dest, repo.url, "repositories.megatron_bridge")
    assert str(err.value) == (
        f"repositories.megatron_bridge: commit {'f' * 40} is not in {repo.url}; check "
        f"repositories.megatron_bridge.commit in the recipe's metadata.yaml: it must be a full "
        f"commit id of {repo.url}")
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_an_unreachable_repository_is_one_line(tmp_path: Path):
    repo = Repo("x", str(tmp_path / "gone" / "X.git"), "a" * 40)
    with pytest.raises(GitError, match=r"^git clone .*gone/X\.git failed: .+$"):
        gitrepos.checkout(repo, tmp_path / "X", repo.url, "repositories.x")
    assert not (tmp_path / "X").exists()


# --- the offline folder -----------------------------------------------------------------------

def fill_offline(world: World, tmp_path: Path) -> tuple[Path, str]:
    """fill a sources folder from the world's repositories and its local Hub; its output."""
    folder, out = tmp_path / "sources", io.StringIO()
    with sourcesworld.local_hub({REPO_ID: sourcesworld.CONFIG}) as hub:
        sources.fill(folder, [world.recipe], env(tmp_path, HF_TOKEN=TOKEN,
                                                 HF_ENDPOINT=hub.endpoint), out)
    assert hub.auth == [f"Bearer {TOKEN}"]  # one download, with the token
    return folder, out.getvalue()


def test_fill_makes_mirrors_of_every_gpu_types_commits_and_the_configs(world: World,
                                                                       tmp_path: Path):
    folder, out = fill_offline(world, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["Megatron-Bridge.git", "Run.git",
                                                        "huggingface"]
    for commit in (world.mb_commit, world.b200_commit):
        assert gitrepos.has_commit(folder / "Megatron-Bridge.git", commit)
    assert hfcache.cached(folder / "huggingface" / "hub", REPO_ID, "main")
    assert TOKEN not in out and "sources ready in" in out
    again = io.StringIO()
    sources.fill(folder, [world.recipe], env(tmp_path, HF_ENDPOINT="http://127.0.0.1:9"), again)
    assert "Megatron-Bridge.git holds" in again.getvalue() and ": kept" in again.getvalue()


def test_fill_fetches_a_commit_pushed_after_the_mirror_was_made(world: World, tmp_path: Path):
    repo, folder = bridge(world), tmp_path / "sources"
    assert gitrepos.mirror(repo, folder, "repositories.megatron_bridge") == "cloned"
    newer = sourcesworld.commit_files(Path(repo.url), {"README.md": "bridge 4\n"}, "later")
    assert gitrepos.mirror(Repo(repo.key, repo.url, newer), folder, "r") == "updated"
    elsewhere = Repo("x", "https://example.invalid/fork/Megatron-Bridge.git", newer)
    with pytest.raises(GitError) as err:
        gitrepos.mirror(elsewhere, folder, "repositories.x of fork")
    assert str(err.value) == (
        f"{folder}/Megatron-Bridge.git mirrors {repo.url}, not {elsewhere.url} (repositories.x "
        "of fork); two repositories with one name cannot share a sources folder: use another "
        "folder")


def test_setup_takes_everything_from_the_sources_folder_without_the_network(
        world: World, tmp_path: Path):
    folder, _ = fill_offline(world, tmp_path)
    shutil.rmtree(world.upstream)  # the urls lead nowhere now: no network
    src, out = sources.resolve(world.recipe), io.StringIO()
    install = tmp_path / "install"
    src = sources.Sources(src.recipe, src.workload, src.framework, src.image, src.repos[:1],
                          src.hf)  # NeMo-Run's pip install: test_nemo_run_is_pip_installed...
    sources.prepare(src, install, env(tmp_path, LLMB_SOURCES=str(folder),
                                      HF_ENDPOINT="http://127.0.0.1:9"), None, out)
    dest = install / "workloads" / "pretrain_bridgetest" / "Megatron-Bridge"
    assert git("rev-parse", "HEAD", cwd=dest) == world.mb_commit
    assert sources.present(src, install)  # what the installer's setup:<w> step asks
    assert not sources.present(sources.resolve(world.recipe, "b200"), install)
    assert git("remote", "get-url", "origin", cwd=dest) == src.repos[0].url
    assert hfcache.cached(install / ".cache" / "huggingface" / "hub", REPO_ID, "main")
    assert "placed from LLMB_SOURCES" in out.getvalue()


def test_a_sources_folder_without_the_repository_or_commit_says_how_to_fill_it(
        world: World, tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GitError) as err:
        gitrepos.origin(bridge(world), empty)
    assert str(err.value) == (
        f"LLMB_SOURCES={empty} has neither Megatron-Bridge.git nor Megatron-Bridge (the "
        f"repository {bridge(world).url}); fill it again on a machine with network: "
        "common/setup.sh --fetch-sources DIR <recipe>...")
    stale = Repo("megatron_bridge", bridge(world).url, "e" * 40)
    gitrepos.mirror(bridge(world), empty, "r")
    with pytest.raises(GitError, match=f"commit {'e' * 40} is not in {empty}/Megatron-Bridge"
                                       r"\.git; fill it again on a machine with network"):
        gitrepos.checkout(stale, tmp_path / "M", gitrepos.origin(stale, empty), "r")
    with pytest.raises(SourcesError, match="LLMB_SOURCES=/nowhere does not exist; give the"):
        sources.sources_folder("/nowhere")


# --- NeMo-Run into the venv -------------------------------------------------------------------

@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real venv; NeMo-Run's stand-in package is what setup pip-installs."""
    monkeypatch.setitem(sources.PIP_DISTRIBUTIONS, "nemo_run", sourcesworld.PACKAGE)
    return sourcesworld.make_venv(tmp_path / "venv")


def test_nemo_run_is_pip_installed_from_its_checkout_at_the_commit(world: World,
                                                                   tmp_path: Path, venv: str):
    src, out = sources.resolve(world.recipe), io.StringIO()
    src = sources.Sources(src.recipe, src.workload, src.framework, src.image, src.repos, ())
    environ = env(tmp_path, LLMB_PIP_ARGS="--no-build-isolation --no-deps --no-index")
    sources.prepare(src, tmp_path / "install", environ, venv, out)
    package = sourcesworld.PACKAGE
    assert gitrepos.installed_commit(venv, package) == world.run_commits[0]
    assert f"{package} at {world.run_commits[0]}: installed in {venv}" in out.getvalue()
    found = subprocess.run([venv, "-c", f"import {package}, os; print(os.path.exists("
                            f"os.path.join(os.path.dirname({package}.__file__), 'later.py')))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert found == "False"  # the pinned commit's files, not the branch head's
    again = io.StringIO()
    sources.prepare(src, tmp_path / "install", environ, venv, again)
    assert f"{package} at {world.run_commits[0]}: kept" in again.getvalue()
    with pytest.raises(SourcesError, match="no Python venv is active to install Run into"):
        sources.prepare(src, tmp_path / "install", environ, None, io.StringIO())
