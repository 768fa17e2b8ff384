"""What a node tells its operators: plain counters on the hot path (``metrics``), their
OpenTelemetry instruments and exporters (``telemetry``), spans (``tracing``), the
Prometheus endpoint (``metrics_endpoint``) and structured logs (``logging_setup``).
"""
