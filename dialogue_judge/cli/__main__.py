"""``python -m dialogue_judge.cli``: the same app as the ``dialogue-judge`` console script."""

from dialogue_judge.cli import main

main()
