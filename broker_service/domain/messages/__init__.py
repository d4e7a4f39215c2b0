"""Messages and topics: creating topics, choosing queues, sending (normal, ordered, batch, with
retransmit dedup), delayed messages, and where a message is in its life."""
