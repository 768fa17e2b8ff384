"""Cormorant's sans-I/O Kafka protocol codec.

Bytes in, typed messages out, and back. Nothing here does I/O, imports Trio, or
imports anything else of Cormorant's.
"""
