"""Broker settings of TLS, SASL and authorization (Kafka's ``BrokerSecurityConfigs``,
``SslConfigs``, ``SaslConfigs`` and the standard authorizer's).

Each list is one section of docs/configuration.md, in the order shown there.
"""

from __future__ import annotations

from typing import Final

from config.catalog.define import (
    AT_LEAST_0,
    AT_LEAST_1,
    BOOLEAN,
    INT,
    LIST,
    LONG,
    PASSWORD,
    STRING,
    group,
    key,
)
from config.types import ConfigKey
from config.validators import (
    EachOneOf,
    OneOf,
    Range,
)

#: The one authorizer Cormorant has: Kafka's KRaft authorizer, with ACLs in the metadata log.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

SECURITY: Final[list[ConfigKey]] = group("Security", [
    key("ssl.keystore.type", STRING, "JKS",
        "Format of the keystore: PEM (KIP-651, inline or in a file) or PKCS12; JKS files are refused.",
        OneOf(("JKS", "PKCS12", "PEM"))),
    key("ssl.keystore.location", STRING, None, "Keystore file: PKCS12, or PEM holding the chain and the key."),
    key("ssl.keystore.password", PASSWORD, None, "Password of the PKCS12 keystore file."),
    key("ssl.key.password", PASSWORD, None, "Password of the private key (PKCS12, or an encrypted PEM key)."),
    key("ssl.keystore.certificate.chain", PASSWORD, None,
        "PEM certificate chain given inline (ssl.keystore.type=PEM), leaf first."),
    key("ssl.keystore.key", PASSWORD, None, "PEM private key given inline (ssl.keystore.type=PEM)."),
    key("ssl.truststore.type", STRING, "JKS",
        "Format of the truststore: PEM or PKCS12; JKS files are refused.", OneOf(("JKS", "PKCS12", "PEM"))),
    key("ssl.truststore.location", STRING, None, "Truststore file: PKCS12, or PEM CA certificates."),
    key("ssl.truststore.password", PASSWORD, None, "Password of the PKCS12 truststore file."),
    key("ssl.truststore.certificates", PASSWORD, None,
        "PEM CA certificates given inline (ssl.truststore.type=PEM)."),
    key("ssl.client.auth", STRING, "none",
        "Client certificates on TLS listeners: required (mutual TLS), requested (used when given) or none.",
        OneOf(("required", "requested", "none"))),
    key("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted.",
        EachOneOf(("TLSv1.2", "TLSv1.3"))),
    key("ssl.protocol", STRING, "TLSv1.3", "Accepted for compatibility; ssl.enabled.protocols decides."),
    key("ssl.cipher.suites", LIST, "",
        "TLS 1.2 cipher suites accepted, by IANA or OpenSSL name; empty means OpenSSL's defaults. "
        "TLS 1.3 suites are always OpenSSL's (all strong)."),
    key("ssl.principal.mapping.rules", STRING, "DEFAULT",
        "Rules mapping a client certificate's distinguished name to a user name "
        "(DEFAULT or RULE:pattern/replacement/[LU], ...); DEFAULT keeps the whole DN."),
    key("ssl.handshake.timeout.ms", LONG, "10000",
        "A TLS handshake not finished within this long closes the connection.", AT_LEAST_1,
        cormorant_only=True),
    key("sasl.enabled.mechanisms", LIST, "GSSAPI",
        "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
        "(GSSAPI is not supported and must be replaced)."),
    key("sasl.server.max.receive.size", INT, "524288",
        "Largest frame accepted from a client before it has authenticated.", AT_LEAST_1),
    key("connection.failed.authentication.delay.ms", INT, "100",
        "How long a failed authentication waits before its answer and the close.", AT_LEAST_0),
    key("sasl.oauthbearer.jwks.endpoint.url", STRING, None,
        "OAUTHBEARER: JWKS of the keys that sign valid tokens (file: or https: URL); unset means Kafka's "
        "unsecured validator (unsigned tokens, development only)."),
    key("sasl.oauthbearer.expected.audience", LIST, "",
        "OAUTHBEARER: a token's aud must name one of these; empty skips the check."),
    key("sasl.oauthbearer.expected.issuer", STRING, None,
        "OAUTHBEARER: a token's iss must be this; unset skips the check."),
    key("sasl.oauthbearer.sub.claim.name", STRING, "sub", "OAUTHBEARER: the claim naming the principal."),
    key("sasl.oauthbearer.scope.claim.name", STRING, "scope", "OAUTHBEARER: the claim holding the scopes."),
    key("sasl.oauthbearer.clock.skew.seconds", INT, "30",
        "OAUTHBEARER: tolerated difference between the token issuer's clock and the broker's.", AT_LEAST_0),
    key("sasl.oauthbearer.token.endpoint.url", STRING, None,
        "OAUTHBEARER: where this broker gets its own token for other brokers and the controllers "
        "(client_credentials grant with the JAAS clientId and clientSecret, or a file: URL holding the "
        "token); unset means Kafka's unsecured login from the unsecuredLogin* JAAS options."),
    key("ssl.endpoint.identification.algorithm", STRING, "https",
        "How this broker checks other brokers' certificates: https checks the host name, empty does not."),
    key("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI",
        "SASL mechanism brokers authenticate to each other with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)."),
    key("sasl.mechanism.controller.protocol", STRING, "GSSAPI",
        "SASL mechanism brokers authenticate to controllers with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)."),
    key("controller.quorum.secret", PASSWORD, None,
        "Shared secret of the metadata quorum's voters: their own traffic is encrypted and authenticated "
        "with it (Fernet: AES-128 and HMAC-SHA256); required when a controller listener is not PLAINTEXT.",
        cormorant_only=True),
    key("connections.max.reauth.ms", LONG, "0",
        "Lifetime of a SASL session (KIP-368): clients re-authenticate before it ends, and a connection "
        "whose session has ended is closed at its next request; 0 means sessions do not expire.",
        AT_LEAST_0),
])  # fmt: skip

#: Encrypted dynamic passwords (broker/security/password_encoder.py), as Kafka's PasswordEncoder.
PASSWORD_ENCODER: Final[list[ConfigKey]] = group("Security", [
    key("password.encoder.secret", PASSWORD, None,
        "Secret that encrypts password-type dynamic configs (listener.name.LISTENER.ssl.keystore.password, "
        "...) in the metadata log; without it such configs cannot be set dynamically."),
    key("password.encoder.old.secret", PASSWORD, None,
        "The previous secret, while rotating it: stored passwords it encrypted are still decoded."),
    key("password.encoder.keyfactory.algorithm", STRING, None,
        "PBKDF2 algorithm deriving the key from the secret: PBKDF2WithHmacSHA512 when unset, "
        "PBKDF2WithHmacSHA256 or PBKDF2WithHmacSHA1."),
    key("password.encoder.cipher.algorithm", STRING, "AES/CBC/PKCS5Padding",
        "Cipher encrypting dynamic passwords: AES/CBC/PKCS5Padding or AES/GCM/NoPadding.",
        OneOf(("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"))),
    key("password.encoder.key.length", INT, "128", "Key length in bits (128, 192 or 256).", Range(min=8)),
    key("password.encoder.iterations", INT, "4096", "PBKDF2 iterations.", Range(min=1024)),
])  # fmt: skip

AUTHORIZATION: Final[list[ConfigKey]] = group("Authorization", [
    key("authorizer.class.name", STRING, "",
        "The authorizer: empty for none (every client may do everything, ACL APIs answer "
        "SECURITY_DISABLED), or org.apache.kafka.metadata.authorizer.StandardAuthorizer for ACLs "
        "kept in the metadata log.",
        OneOf(("", STANDARD_AUTHORIZER))),
    key("super.users", STRING, None,
        "Principals allowed everything whatever the ACLs, separated by semicolons (User:admin;User:broker)."),
    key("allow.everyone.if.no.acl.found", BOOLEAN, "false",
        "Whether an action on a resource no ACL names is allowed."),
])  # fmt: skip
