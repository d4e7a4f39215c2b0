"""Consumer groups (RocketMQ 5's SimpleConsumer): groups and subscriptions, receive, ack and
change-invisible, retry and dead-letter copies, long-poll wake-ups, an operator's view, the trace."""
