"""The broker's system topics and the prefixes of consumers' copies, as the checks, the extract
and the generator name them."""

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
