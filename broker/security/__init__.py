"""Authentication, encryption and authorization of client connections, as Kafka's listeners
have them.

``tls``: TLS contexts from Kafka's ``ssl.*`` settings (PEM and PKCS12 stores), ``principal``:
the principal of a client certificate (``ssl.principal.mapping.rules``), ``sasl``: the SASL
exchange before a connection is served (PLAIN and SCRAM), ``setup``: what a listener runs
when a connection opens. ``kafka_principal``: who sent a request (Kafka's KafkaPrincipal),
``authorizer``: Kafka's StandardAuthorizer over the ACLs of the metadata image,
``acl_operations``: the checks handlers make, ``acl_requests``: CreateAcls/DeleteAcls and
their forwarding to the controller, ``audit_log``: the authorizer's log of decisions.
"""
