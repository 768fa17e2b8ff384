"""Cormorant's broker: the data plane that serves Kafka clients."""
