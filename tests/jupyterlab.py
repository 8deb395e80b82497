"""Real front ends for browser tests, on 127.0.0.1: JupyterLab or Notebook 7 (a private config and
this venv's kernel), and marimo serving a notebook file.

Used with headless Debian Chromium (never a browser download) driven by Playwright.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require, require_executable

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


ASSETS = Path(__file__).parent.parent / "assets"


def screenshot_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`assets/` when refreshing the pictures the README and tutorials show (``make assets``), else a
    temporary folder: a plain test run leaves the working tree as it found it."""
    if os.environ.get("AEGIS_REFRESH_ASSETS") == "1":
        return ASSETS
    return tmp_path_factory.mktemp("screenshots")


@dataclass(frozen=True)
class Lab:
    url: str
    token: str
    root: Path  # the folder JupyterLab serves
    log: list[str]  # the server's stderr, as it arrives


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_kernelspec(jupyter_path: Path) -> None:
    """A ``python3`` kernel running this interpreter (the venv's), found before any other."""
    spec = jupyter_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (aegis_nb tests)",
                "language": "python",
            }
        )
    )


def chromium() -> str:
    """The Debian Chromium executable (skip, or fail in strict mode, without it)."""
    return require_executable("chromium")


@contextmanager
def running_lab(base: Path, app: str = "jupyter-lab", disabled: tuple[str, ...] = ()) -> Iterator[Lab]:
    """Serve ``base / "notebooks"`` (the caller fills it) until the block ends.

    `app` is the server: ``jupyter-lab``, or ``jupyter-notebook`` for Notebook 7. `disabled` names
    front-end extensions to switch off (the widget manager, to see what a front end without one shows).
    """
    chromium()
    require(shutil.which(app, path=str(Path(sys.executable).parent)) is not None, app)
    root = base / "notebooks"
    root.mkdir(exist_ok=True)
    write_kernelspec(base / "jupyter-path")
    notifications = base / "settings" / "@jupyterlab" / "apputils-extension"
    notifications.mkdir(parents=True)
    (notifications / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    if disabled:
        labconfig = base / "config" / "labconfig"
        labconfig.mkdir(parents=True)
        pages = {"disabledExtensions": dict.fromkeys(disabled, True)}
        (labconfig / "page_config.json").write_text(json.dumps(pages))
    token, port = secrets.token_hex(16), free_port()
    env = {
        **os.environ,
        "JUPYTER_PATH": str(base / "jupyter-path"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
    }
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / app),
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = threading.Event()
    log: list[str] = []

    def watch() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            log.append(line)
            if f"127.0.0.1:{port}/" in line:
                started.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not started.wait(timeout=90):
            pytest.fail(f"{app} did not start:\n" + "".join(log[-30:]))
        yield Lab(f"http://127.0.0.1:{port}", token, root, log)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@dataclass(frozen=True)
class Marimo:
    url: str
    log: list[str]  # the server's output, as it arrives


@contextmanager
def running_marimo(notebook: Path) -> Iterator[Marimo]:
    """``marimo run notebook`` (the app view: every cell runs when a page connects) until the block ends."""
    chromium()
    marimo = shutil.which("marimo", path=str(Path(sys.executable).parent))
    require(marimo is not None, "marimo")
    assert marimo is not None
    port = free_port()
    command = [marimo, "run", str(notebook), "--headless", "--no-token", "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*command, "--port", str(port)],
        env={**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1"},
        cwd=notebook.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = threading.Event()
    log: list[str] = []

    def watch() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            log.append(line)
            if f":{port}" in line:
                started.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not started.wait(timeout=90):
            pytest.fail("marimo did not start:\n" + "".join(log[-30:]))
        yield Marimo(f"http://127.0.0.1:{port}", log)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
