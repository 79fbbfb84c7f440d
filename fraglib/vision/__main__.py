"""``python -m fraglib.vision features|regions|objectness [ARGS]``: the image fragments of a dataset (features:
proposals, CNN descriptors, the caches the systems read), detection tables (regions) and objectness (``COMMAND
--help`` for its arguments)."""

import sys

COMMANDS = ("features", "regions", "objectness")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        choices = ",".join(COMMANDS)
        print(
            f"usage: python -m fraglib.vision {{{choices}}} [ARGS]  (COMMAND --help for its arguments)", file=sys.stderr
        )
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    sys.argv[0] = f"python -m fraglib.vision {argv[0]}"
    if argv[0] == "features":  # each imported where it runs: a command loads only its own module
        from fraglib.vision.features import main as run
    elif argv[0] == "regions":
        from fraglib.vision.regions import main as run
    else:
        from fraglib.vision.objectness import main as run
    return run(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
