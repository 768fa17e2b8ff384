"""Kafka's quotas on one broker: the quota managers and throttling (``managers``), client
byte-rate quotas (``client_quota_manager``), connection limits (``connection_quotas``)
and AlterClientQuotas forwarding (``quota_requests``).
"""
