"""Black-box compatibility suite: real Kafka clients against a real broker process."""
