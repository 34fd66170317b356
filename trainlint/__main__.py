"""The `trainlint` command and `python -m trainlint`."""

import gc
import sys


def main() -> None:
    """Run the command line. Its modules (click's, the commands') are imported with collection paused,
    then frozen (`gc.freeze`): they live as long as the process, and the collector's passes over them
    while they were made freed nothing (about 0.006 s of a cached run's 0.07 s).

    `trainlint lsp` alone skips them: an editor waits for the server's answer to `initialize`, and
    the command line's modules are 0.15 s or more that the language server does not use."""
    if sys.argv[1:] == ["lsp"]:
        from trainlint.lsp.launch import run_command

        run_command()
        return
    collecting = gc.isenabled()
    gc.disable()
    try:
        from trainlint.cli import run
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    run()


if __name__ == "__main__":
    main()
