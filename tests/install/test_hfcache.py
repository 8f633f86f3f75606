"""llmb.install.hfcache and the sources step's Hugging Face half: config.json placed in the
cache layout offline `huggingface_hub` reads (checked with huggingface_hub itself), from a
sources folder or over HTTP from a local Hub (http.server) with the install's token, which is
sent to that host only and never appears in any output or error."""

from __future__ import annotations

import http.server
import io
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sourcesworld
from llmb.install import hfcache, sources
from llmb.install.hfcache import HfError
from llmb.install.sources import HfConfig
from llmb.shared import values
from sourcesworld import CONFIG, HUB_COMMIT, REPO_ID

TOKEN = "hf_HubTestToken0123456789abcdefghijk"


def offline_lookup(hf_home: Path, repo_id: str = REPO_ID) -> str | None:
    """What huggingface_hub, offline, finds for config.json under this HF_HOME."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(hfcache.hub(hf_home)))
    return found if isinstance(found, str) else None


def hub_for(tmp_path: Path, endpoint: str, **environ: str) -> sources.Hub:
    install = tmp_path / "install"
    return sources.Hub(hfcache.hub(install / ".cache" / "huggingface"), None, endpoint,
                       environ, install)


def test_a_placed_config_is_what_offline_huggingface_hub_reads(tmp_path: Path):
    link = hfcache.place(tmp_path / "hub", REPO_ID, "main", HUB_COMMIT, CONFIG)
    folder = tmp_path / "hub" / "models--meta-llama--Meta-Llama-3-70B"
    assert link == folder / "snapshots" / HUB_COMMIT / "config.json" and link.is_symlink()
    assert os.readlink(link) == f"../../blobs/{hfcache.blob_name(CONFIG)}"
    assert (folder / "refs" / "main").read_text() == HUB_COMMIT
    assert offline_lookup(tmp_path) == str(link)
    assert Path(offline_lookup(tmp_path) or "").read_bytes() == CONFIG
    # the Hub's ETag of a small file: git's blob id
    assert hfcache.blob_name(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_downloads_with_the_token_and_a_rerun_asks_nothing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    with sourcesworld.local_hub({REPO_ID: CONFIG}) as seen:
        hub = hub_for(tmp_path, seen.endpoint, HF_TOKEN=TOKEN)
        hub.ensure(HfConfig(REPO_ID), out := io.StringIO())
        hub.ensure(HfConfig(REPO_ID), again := io.StringIO())
    assert seen.paths == [f"/{REPO_ID}/resolve/main/config.json"]
    assert seen.auth == [f"Bearer {TOKEN}"]
    assert offline_lookup(tmp_path / "install" / ".cache" / "huggingface")
    assert f"downloaded into {hub.target} (commit {HUB_COMMIT})" in out.getvalue()
    assert "already in" in again.getvalue()
    captured = capsys.readouterr()
    assert TOKEN not in out.getvalue() + again.getvalue() + captured.out + captured.err


def test_the_installers_token_file_is_used_when_hf_token_is_unset(tmp_path: Path):
    install = tmp_path / "install"
    install.mkdir()
    (install / ".hf_token").write_text(TOKEN + "\n")
    with sourcesworld.local_hub({REPO_ID: CONFIG}) as seen:
        hub_for(tmp_path, seen.endpoint).ensure(HfConfig(REPO_ID), io.StringIO())
    assert seen.auth == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize(("status", "token", "message"), [
    (401, TOKEN, f"Hugging Face refused {REPO_ID} (HTTP 401): the token (HF_TOKEN, or "
                 "$LLMB_INSTALL/.hf_token) has no access to it: accept the model's terms at "
                 f"https://huggingface.co/{REPO_ID} with that account"),
    (403, None, f"Hugging Face refused {REPO_ID} (HTTP 403): it needs a token: export HF_TOKEN"),
    (404, TOKEN, "Hugging Face has no config.json at "),
    (500, TOKEN, "downloading http://127.0.0.1:"),
])
def test_a_refusal_is_one_line_without_the_token(tmp_path: Path, status: int,
                                                 token: str | None, message: str):
    environ = {"HF_TOKEN": token} if token else {}
    with sourcesworld.local_hub({REPO_ID: CONFIG}, status) as seen, \
            pytest.raises(HfError) as err:
        hub_for(tmp_path, seen.endpoint, **environ).ensure(HfConfig(REPO_ID), io.StringIO())
    text = str(err.value)
    assert text.startswith(message) and "\n" not in text and TOKEN not in text
    assert not (tmp_path / "install" / ".cache").exists()


def test_no_network_says_how_to_work_offline(tmp_path: Path):
    with pytest.raises(HfError) as err:
        hub_for(tmp_path, "http://127.0.0.1:9", HF_TOKEN=TOKEN).ensure(HfConfig(REPO_ID),
                                                                       io.StringIO())
    assert str(err.value).startswith(f"cannot download http://127.0.0.1:9/{REPO_ID}/resolve/")
    assert "set LLMB_SOURCES=DIR here" in str(err.value) and TOKEN not in str(err.value)


def test_a_bad_token_is_refused_without_showing_it(tmp_path: Path):
    with pytest.raises(values.BadValue) as err:
        sources.hf_token({"HF_TOKEN": "hf_has a space in it 0123456789"}, None)
    assert "HF_TOKEN contains a space" in str(err.value) and "0123456789" not in str(err.value)


@contextmanager
def redirecting_hub(to: str) -> Iterator[tuple[str, list[str | None]]]:
    """A Hub that sends every request on to `to` (another host), recording what it got."""
    auth: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            auth.append(self.headers.get("Authorization"))
            self.send_response(302)
            self.send_header("Location", to + self.path)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", auth
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_never_follows_a_redirect_to_another_host(tmp_path: Path):
    with sourcesworld.local_hub({REPO_ID: CONFIG}) as other:
        to = other.endpoint.replace("127.0.0.1", "localhost")  # another host name
        with redirecting_hub(to) as (endpoint, auth):
            hub_for(tmp_path, endpoint, HF_TOKEN=TOKEN).ensure(HfConfig(REPO_ID), io.StringIO())
    assert auth == [f"Bearer {TOKEN}"] and other.auth == [None]
    assert offline_lookup(tmp_path / "install" / ".cache" / "huggingface")


def test_a_sources_folder_without_the_config_says_how_to_fill_it(tmp_path: Path):
    with pytest.raises(HfError) as err:
        hfcache.copy_from(tmp_path / "s" / "huggingface" / "hub", tmp_path / "hub", REPO_ID,
                          "main", "LLMB_SOURCES=/s")
    assert str(err.value).startswith(f"LLMB_SOURCES=/s has no config.json of {REPO_ID} "
                                     "(revision main) under ")
    assert str(err.value).endswith("common/setup.sh --fetch-sources DIR <recipe>...")
    sourcesworld.seed_sources_hub(tmp_path / "s")
    hfcache.copy_from(tmp_path / "s" / "huggingface" / "hub", tmp_path / "h" / "hub", REPO_ID,
                      "main", "LLMB_SOURCES=/s")
    assert offline_lookup(tmp_path / "h")
