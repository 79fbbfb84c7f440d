"""``python -m fraglib.run train|evaluate [ARGS]``: train one run, or score a trained run or another tool's score
matrix (``COMMAND --help`` for its arguments)."""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in ("train", "evaluate"):
        print(
            "usage: python -m fraglib.run {train,evaluate} [ARGS]  (COMMAND --help for its arguments)", file=sys.stderr
        )
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    sys.argv[0] = f"python -m fraglib.run {argv[0]}"
    if argv[0] == "train":
        from fraglib.run.train import main as run
    else:
        from fraglib.run.evaluate import main as run
    return run(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
