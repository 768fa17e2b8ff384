"""Tests of the Kafka-format log storage (broker/log)."""
