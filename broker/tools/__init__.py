"""Command-line tools: ``cormorant topics`` (like kafka-topics.sh) and ``cormorant dump-log``
(like kafka-dump-log.sh). They talk to a broker over the Kafka protocol or read segment
files directly; they never import the broker's runtime."""
