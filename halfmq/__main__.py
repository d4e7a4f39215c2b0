"""``python -m halfmq`` is the ``halfmq`` command."""

from halfmq.cli import main

main()
