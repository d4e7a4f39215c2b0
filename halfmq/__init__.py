"""The top of the house: what commands and composes every other part.

``halfmq.cli`` is the ``halfmq`` command (``python -m halfmq``); ``halfmq.testing`` runs the real
broker in a test's own process behind the real clients' transports.  Nothing else imports this
package (docs/architecture.md).
"""
