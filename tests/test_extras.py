"""Installed without an extra, a part that needs it fails with one line naming the extra and the pip
command, not ``No module named 'pydantic'`` from deep inside; the core and the alias still import.

Each case runs in a fresh interpreter whose import system refuses the modules an install without the
extra lacks (a `sys.meta_path` finder put first), so the dev environment, which has every extra,
behaves as a user's smaller install would.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from tests.servers.launch import ROOT

CORE_ONLY = ("mcp", "pydantic", "pydantic_core", "anywidget", "ipywidgets", "IPython", "temporalio")
WITH_MCP = ("anywidget", "ipywidgets", "IPython", "temporalio")

BLOCKER = """
import sys

class Uninstalled:
    '''Refuses the modules named on the command line, and their submodules, as if not installed.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.argv[1].split(","):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
exec(sys.argv[2])
"""


def run_without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new interpreter where `modules` cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(modules), code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def missing(part: str, extra: str, module: str) -> str:
    """The message of a `MissingExtra`: what needs which extra, the module not found, the pip lines.

    aegis-nb is on no package index: the lines name the installs that work, from a clone and from the
    wheel a clone builds (named by the installed version, as pip and hatchling name it).
    """
    wheel = f"aegis_nb-{metadata.version('aegis-nb')}-py3-none-any.whl"
    return (
        f"{part} needs the {extra!r} extra (no module named {module!r}): pip install -e '.[{extra}]' in a"
        f" clone, or pip install '{wheel}[{extra}]' from a built wheel"
    )


SERVER = "aegis_nb.server (AegisMCP, connect, ToolPairStep)"
MOCK = "aegis_nb.mock (the mock travel agency)"
VIEWS = "aegis_nb.notebook (LiveView, ReplayView, SagaDiagram)"
MAGICS = "%load_ext aegis_nb (the saga magics)"
TEMPORAL = "aegis_nb.temporal (sagas on Temporal)"
TRACING = "aegis_nb.tracing (SagaTracer)"
TRIP_MODEL = "TripAgent.function_model (a pydantic-ai model)"
FUNCTION_MODEL = "from aegis_nb.notebook.trip_agent import TripAgent; TripAgent().function_model()"
LOAD_EXT = "import aegis_nb; aegis_nb.load_ipython_extension(None)"


@pytest.mark.parametrize(
    ("uninstalled", "code", "message"),
    [
        (CORE_ONLY, "from aegis_nb import AegisMCP", missing(SERVER, "mcp", "mcp")),
        (CORE_ONLY, "from aegis_nb import connect", missing(SERVER, "mcp", "mcp")),
        (CORE_ONLY, "from aegismcp.server.app import AegisMCP", missing(SERVER, "mcp", "mcp")),
        (CORE_ONLY, "from aegis_nb import TravelAgency", missing(MOCK, "mcp", "pydantic")),
        (CORE_ONLY, "import aegis_nb.notebook", missing(VIEWS, "notebook", "anywidget")),
        (WITH_MCP, "from aegis_nb import SagaDiagram", missing(VIEWS, "notebook", "anywidget")),
        # anywidget draws every view: ipywidgets alone is not the notebook extra.
        (("anywidget",), "import aegis_nb.notebook", missing(VIEWS, "notebook", "anywidget")),
        (("ipywidgets",), "import aegis_nb.notebook", missing(VIEWS, "notebook", "ipywidgets")),
        (("anywidget",), LOAD_EXT, missing(MAGICS, "notebook", "anywidget")),
        (CORE_ONLY, "import aegis_nb.temporal", missing(TEMPORAL, "temporal", "temporalio")),
        (WITH_MCP, "import aegis_nb.temporal", missing(TEMPORAL, "temporal", "temporalio")),
        # What %load_ext calls. IPython may come from elsewhere (a Jupyter install), the rest not.
        (("ipywidgets", "mcp", "pydantic"), LOAD_EXT, missing(MAGICS, "notebook", "ipywidgets")),
        (("mcp", "pydantic"), LOAD_EXT, missing(MAGICS, "notebook", "pydantic")),
        # The OpenTelemetry API comes with mcp; an install without either lacks it.
        (
            ("opentelemetry",),
            "from aegis_nb.tracing import SagaTracer",
            missing(TRACING, "otel", "opentelemetry"),
        ),
        ((*CORE_ONLY, "opentelemetry"), "import aegis_nb.tracing", missing(TRACING, "otel", "opentelemetry")),
        # The notebook extra without the agents one: the scripted agent is there, its pydantic-ai model not.
        (("pydantic_ai",), FUNCTION_MODEL, missing(TRIP_MODEL, "agents", "pydantic_ai")),
    ],
)
def test_a_part_without_its_extra_names_the_extra_to_install(
    uninstalled: tuple[str, ...], code: str, message: str
) -> None:
    result = run_without(uninstalled, code)
    assert result.returncode == 1
    assert last_line(result.stderr) == f"aegis_nb.kernel.extras.MissingExtra: {message}"


def test_the_missing_extra_error_is_an_aegis_error_and_a_module_not_found_error_naming_the_module() -> None:
    code = (
        "from aegis_nb import AegisError\n"
        "try:\n"
        "    from aegis_nb import AegisMCP\n"
        "except ImportError as exc:\n"
        "    print(isinstance(exc, AegisError), isinstance(exc, ModuleNotFoundError), exc.name, exc.extra,\n"
        "          exc.__suppress_context__)\n"
    )
    result = run_without(CORE_ONLY, code)
    assert result.stdout == "True True mcp mcp True\n"


def test_a_module_the_extra_does_not_bring_is_reported_as_it_was() -> None:
    # starlette comes with mcp: missing, the install is broken, and naming the extra would mislead.
    result = run_without(("starlette",), "import aegis_nb.server")
    assert last_line(result.stderr) == "ModuleNotFoundError: No module named 'starlette'"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["demo"], "aegis-nb demo: " + missing("the travel-agency demo", "mcp", "mcp")),
        (["serve", "app:app"], "aegis-nb serve: " + missing("serving an MCP app", "mcp", "mcp")),
        (["mock"], "aegis-nb mock: " + missing(MOCK, "mcp", "pydantic")),
    ],
)
def test_a_command_without_its_extra_says_so_in_one_line(command: list[str], message: str) -> None:
    result = run_without(CORE_ONLY, f"from aegis_nb.cli import main; raise SystemExit(main({command!r}))")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", message + "\n")


def test_the_commands_without_an_extra_work_on_the_core_alone() -> None:
    code = "from aegis_nb.cli import main; raise SystemExit(main(['runs', '--journal', 'no/such.db']))"
    result = run_without(CORE_ONLY, code)
    assert (result.returncode, result.stderr) == (
        2,
        "aegis-nb runs: journal 'no/such.db': no such journal file\n",
    )


def test_the_core_and_the_documented_kernel_alias_import_without_any_extra() -> None:
    code = (
        "import aegis_nb, aegismcp\n"
        "from aegismcp.kernel.context import AegisContext\n"
        "from aegismcp.kernel.errors import SagaRolledBack\n"
        "assert AegisContext is aegis_nb.AegisContext and SagaRolledBack is aegis_nb.SagaRolledBack\n"
        "assert aegismcp.WorkflowEngine is aegis_nb.WorkflowEngine\n"
        "print(aegismcp.__version__)\n"
    )
    result = run_without(CORE_ONLY, code)
    assert (result.returncode, result.stdout, result.stderr) == (0, "0.1.0\n", "")


def test_the_documented_server_alias_imports_with_the_mcp_extra_alone() -> None:
    code = "import aegismcp\nfrom aegismcp.server.app import AegisMCP\nprint(aegismcp.AegisMCP is AegisMCP)\n"
    result = run_without(WITH_MCP, code)
    assert (result.returncode, result.stdout, result.stderr) == (0, "True\n", "")


def test_the_alias_exposes_every_public_name_as_the_same_object() -> None:
    import aegis_nb
    import aegismcp

    assert aegismcp.__all__ == aegis_nb.__all__
    assert [name for name in aegis_nb.__all__ if getattr(aegismcp, name) is not getattr(aegis_nb, name)] == []
