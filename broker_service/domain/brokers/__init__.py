"""The brokers sharing one store: each records that it is alive, and any of them lists them all."""
