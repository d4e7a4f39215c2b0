"""``python -m spark_reconcile --date D ...`` and ``spark-submit spark_reconcile/__main__.py``."""

from spark_reconcile.cli import main

if __name__ == "__main__":
    main()
