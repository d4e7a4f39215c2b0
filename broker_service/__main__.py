"""``python -m broker_service`` is ``halfmq``."""

from broker_service.cli import main

main()
