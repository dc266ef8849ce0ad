"""The console script imports only the command it runs: importing every command (benchmarks, the simulator,
the demos, the whole client) took longer than most commands take to run."""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from txnsim.cli.main import COMMAND_MODULES, build_parser


def _loaded_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter has loaded once `txnsim ARGV` has parsed its arguments."""
    script = ("import sys\nfrom txnsim.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
              "    pass\nprint('\\n'.join(sys.modules))")
    run = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60)
    return set(run.stdout.splitlines())


def test_each_module_registers_exactly_the_commands_the_table_gives_it():
    for module_name in set(COMMAND_MODULES.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"txnsim.cli.{module_name}").register(sub)
        assert set(sub.choices) == {c for c, m in COMMAND_MODULES.items() if m == module_name}, module_name


def test_the_full_parser_has_every_command_in_the_tables_order():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices) == list(COMMAND_MODULES)


def test_a_command_loads_its_own_module_and_not_the_others():
    loaded = _loaded_after("topics", "--help")
    assert "txnsim.cli.topics_cmd" in loaded
    assert not {"txnsim.cli.bench_cmd", "txnsim.cli.simulate_cmd", "txnsim.cli.demo_cmd", "consumer"} & loaded
    assert not {m for m in _loaded_after("--version") if m.endswith("_cmd")}
    assert {f"txnsim.cli.{m}" for m in COMMAND_MODULES.values()} <= _loaded_after("--help")


def test_abbreviated_options_and_shell_completion_find_the_command(monkeypatch):
    from txnsim.cli.main import _modules_needed

    assert _modules_needed(["--log", "DEBUG", "topics", "list"]) == ["topics_cmd"]
    assert _modules_needed(["--vers"]) == []
    assert _modules_needed(["--log-level=DEBUG", "consume", "t"]) == ["io_cmd"]
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    line = "txnsim topics cr"
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    assert _modules_needed([]) == ["topics_cmd"]
    monkeypatch.setenv("COMP_POINT", str(len("txnsim top")))  # the command's own name is being completed
    assert len(_modules_needed([])) == len(set(COMMAND_MODULES.values()))


def test_every_public_name_of_txnsim_loads_on_first_use():
    script = "import txnsim\nfrom txnsim import *\nprint(sorted(n for n in txnsim.__all__ if getattr(txnsim, n) is None))"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr  # a name of __all__ the lazy table misses fails the star import
    assert run.stdout.strip() == "[]"
