"""Entry point of the `txnsim` console script."""
# PYTHON_ARGCOMPLETE_OK  (argcomplete's marker: `eval "$(register-python-argcomplete txnsim)"` completes quickly)
from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

import argcomplete

#: the module (under txnsim.cli) that defines each command; a call imports only its command's module, since all
#: of them together take longer to import than most commands take to run
COMMAND_MODULES = {
    "cluster": "cluster_cmd", "topics": "topics_cmd", "produce": "io_cmd", "consume": "io_cmd",
    "transactions": "transactions_cmd", "consumer-groups": "groups_cmd", "dump-log": "dump_log_cmd",
    "demo": "demo_cmd", "pipeline": "pipeline_cmd", "chaos": "chaos_cmd", "bench": "bench_cmd",
    "simulate": "simulate_cmd", "ui": "ui_cmd", "node": "node_cmd", "zookeeper": "node_cmd",
}

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Parser(argparse.ArgumentParser):
    """argparse, with its error as the command's own usage and then one `error:` line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {self.prog}: {message}\n")


def _log_level(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"[INVALID_CONFIG] unknown log level {text!r}; one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def _version() -> str:
    try:
        return version("txnsim")
    except PackageNotFoundError:  # run from a clone without `pip install -e .`
        return "unknown (not installed)"


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given the arguments of a call that names one, of that command alone."""
    parser = Parser(prog="txnsim", description="Run, break and watch Kafka-style transactions.")
    parser.add_argument("--version", action="version", version=f"txnsim {_version()}")
    parser.add_argument("--log-level", type=_log_level, default="WARNING",
                        help=f"client-side logging: {', '.join(LOG_LEVELS)} (default WARNING)")
    # the metavar names every command, also when only one command's module was imported
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                metavar="{" + ",".join(COMMAND_MODULES) + "}")
    for name in _modules_needed(argv):
        importlib.import_module(f"txnsim.cli.{name}").register(sub)
    _remember_parsers(parser)
    return parser


def _modules_needed(argv: list[str] | None) -> list[str]:
    """The command modules a call needs: the one of the command it names; none for --version; all of them for
    help or a bad command name, which list every command. A shell's completion is judged by the words typed
    before the cursor (argcomplete's COMP_LINE): every module until the command's name is complete."""
    every = list(dict.fromkeys(COMMAND_MODULES.values()))
    if argv is None:
        return every
    if "_ARGCOMPLETE" in os.environ:
        argv = _completed_words(os.environ.get("COMP_LINE", ""), os.environ.get("COMP_POINT"))
        if argv is None:
            return every
    words = iter(argv)
    for word in words:
        if _is_option(word, "--log-level"):
            next(words, None)
        elif _is_option(word, "--version"):
            return []
        elif not word.startswith("-") or word in ("-h", "--help"):
            return [COMMAND_MODULES[word]] if word in COMMAND_MODULES else every
    return every


def _is_option(word: str, option: str) -> bool:
    """`word` is `option` or an abbreviation argparse would take for it (all top-level options start apart)."""
    return len(word) > 2 and "=" not in word and option.startswith(word)


def _completed_words(line: str, point: str | None) -> list[str] | None:
    """The arguments fully typed before the cursor (the program's name dropped), or None if they do not parse."""
    typed = line[:int(point)] if point and point.isdigit() else line
    try:
        words = shlex.split(typed)
    except ValueError:  # an open quote
        return None
    if words and not typed[-1:].isspace():
        words = words[:-1]  # the word being completed
    return words[1:]


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser as its default `_parser`, so that stray flags are reported with the usage of
    the command they were given to, not the top level's."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _remember_parsers(child)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    argcomplete.autocomplete(parser)
    args, extra = parser.parse_known_args(argv)
    if extra:
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
