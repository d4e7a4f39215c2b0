"""The clients that speak a protocol of their own to the broker (RocketMQ 5's gRPC): who they say
they are, and the settings they last declared."""
