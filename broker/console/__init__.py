"""``cormorant console``: a web console for any Kafka-compatible cluster.

It is a Kafka client: everything it shows comes from the Kafka protocol
(:mod:`broker.tools.client`), plus a broker's Prometheus metrics endpoint when one
is given. A background poller keeps a :class:`~broker.console.snapshot.Snapshot`
of the cluster that pages render from; the message browser and the mutations
ask the cluster directly.
"""
