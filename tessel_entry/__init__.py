"""The `tessel` command's entry point (pyproject's [project.scripts]). It lies outside the
tessel package so that it runs before tessel is imported (numpy, the compiler stack: about a
second): Ctrl-C during that import is one line and exit status 130, as it is once the command
runs (tessel.cli.main.main), instead of a KeyboardInterrupt traceback."""
import sys


def main() -> int:
    try:
        from tessel.cli.main import main as run
    except KeyboardInterrupt:
        print("tessel: interrupted", file=sys.stderr)
        return 130
    return run()
