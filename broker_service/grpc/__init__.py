"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2.MessagingService``): an adapter beside the
REST API, over the same domain services, ACL, metrics and trace (docs/rocketmq.md)."""
