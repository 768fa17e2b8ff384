"""Client telemetry (KIP-714): subscriptions matched to client instances, and the metrics
clients push, exported through the broker's own OpenTelemetry pipeline."""
