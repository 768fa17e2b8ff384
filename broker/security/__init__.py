"""Authentication and encryption of client connections, as Kafka's listeners have them.

``tls``: TLS contexts from Kafka's ``ssl.*`` settings (PEM and PKCS12 stores), ``principal``:
the principal of a client certificate (``ssl.principal.mapping.rules``), ``sasl``: the SASL
exchange before a connection is served (PLAIN and SCRAM), ``setup``: what a listener runs
when a connection opens.
"""
