"""halfmq's wire contract, written once for both sides of it (docs/architecture.md, "The wire
contract"; docs/api.md and docs/acl.md are its prose).

The broker (:mod:`broker_service`) and the client library (:mod:`framework`) both import it; it
imports neither, and nothing but the standard library: no I/O, no HTTP library, no validation
library.  Its modules:

* :mod:`halfmq_wire.signature`: the request signature -- the canonical request, its HMAC-SHA256
  (the standard library's ``hmac``), the header names, reading and checking the signed headers,
  and verifying one request (each side adds what it remembers: the nonces seen);
* :mod:`halfmq_wire.errors`: the error envelope, an item's error in a batch answer, and the
  codes a signature is refused with;
* :mod:`halfmq_wire.records`: the answers both sides read and write the same way
  (:class:`~halfmq_wire.records.HalfReceipt`, :class:`~halfmq_wire.records.AckResult`);
* :mod:`halfmq_wire.delays`: the retry schedule's default delay levels.
"""
