"""Share groups (KIP-932): Kafka's queues on topics."""
