"""Security building blocks without sockets: SCRAM, PLAIN, JAAS, principal rules, credential admin."""

from __future__ import annotations

import base64
import hashlib
import hmac
from itertools import count

import pytest

from broker.security.jaas import JaasError, parse_jaas_config
from broker.security.mechanism import AuthenticationFailed, PlainServer
from broker.security.principal import PrincipalMapper, PrincipalMappingError
from broker.security.scram import (
    ScramCredential,
    ScramServer,
    credential_from_salted_password,
    new_credential,
    salted_password,
)
from broker.security.scram_admin import alter_credentials, describe_credentials
from broker.security.scram_bootstrap import ScramArgumentError, parse_add_scram, upsertion_request
from controller.image import MetadataImage
from controller.state import apply
from wire.errors import ErrorCode
from wire.generated.api_050_describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUserName,
)
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestScramCredentialDeletion,
    AlterUserScramCredentialsRequestScramCredentialUpsertion,
)
from wire.primitives import Message

# -- SCRAM -------------------------------------------------------------------------------------


def test_rfc7677_test_vector() -> None:
    """RFC 7677 section 3: user "user", password "pencil"; our keys give its proof and signature."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = credential_from_salted_password(
        "SCRAM-SHA-256", salted_password("SCRAM-SHA-256", "pencil", salt, 4096), salt, 4096)
    auth_message = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
                    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
                    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_signature = hmac.new(credential.server_key, auth_message, "sha256").digest()
    assert base64.b64encode(server_signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(credential.stored_key, auth_message, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == credential.stored_key


def _client_exchange(server: ScramServer, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bytes:
    """Drives ``server`` as an RFC 5802 client would; returns the server-final message."""
    hash_name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    client_first_bare = f"n={user},r=clientnonce"
    server_first = server.evaluate(f"n,,{client_first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    signature = hmac.new(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    return server.evaluate(f"{without_proof},p={proof}".encode())


def _server(credentials: dict[tuple[str, int], ScramCredential], mechanism: str = "SCRAM-SHA-256") -> ScramServer:
    counter = count()
    return ScramServer(mechanism, lambda user, type_id: credentials.get((user, type_id)), b"k" * 32,
                       random_bytes=lambda n: bytes([next(counter) % 256]) * n)


@pytest.mark.parametrize(("mechanism", "type_id"), [("SCRAM-SHA-256", 1), ("SCRAM-SHA-512", 2)])
def test_scram_exchange_authenticates(mechanism: str, type_id: int) -> None:
    credential = new_credential(mechanism, "alice-secret")
    server = _server({("alice", type_id): credential}, mechanism)
    final = _client_exchange(server, "alice", "alice-secret", mechanism)
    assert final.startswith(b"v=") and server.complete and server.authorization_id == "alice"
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"more")


def test_scram_wrong_password_and_unknown_user_fail_alike() -> None:
    credentials = {("alice", 1): new_credential("SCRAM-SHA-256", "alice-secret")}
    failures = []
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        server = _server(credentials)
        with pytest.raises(AuthenticationFailed) as caught:
            _client_exchange(server, user, password)
        failures.append(str(caught.value))
        assert not server.complete
    assert failures[0] == failures[1]


def test_scram_made_up_challenge_is_stable_per_user() -> None:
    first = _server({}).evaluate(b"n,,n=mallory,r=abc").decode().split(",")[1:]
    second = _server({}).evaluate(b"n,,n=mallory,r=abc").decode().split(",")[1:]
    assert first == second  # salt and iterations do not reveal that the user is unknown


@pytest.mark.parametrize("first", [b"p=tls-unique,,n=alice,r=x", b"n,,n=alice", b"garbage", b"n,,m=ext,n=a,r=x",
                                   b"n,,n=al=ice,r=x", b"\xff\xfe"])
def test_scram_malformed_client_first_fails(first: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        _server({}).evaluate(first)


def test_scram_client_final_with_other_nonce_fails() -> None:
    server = _server({("alice", 1): new_credential("SCRAM-SHA-256", "x")})
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.evaluate(b"c=biws,r=abcdef,p=AAAA")


# -- PLAIN -------------------------------------------------------------------------------------


def test_plain() -> None:
    server = PlainServer({"alice": "alice-secret"})
    assert server.evaluate(b"\0alice\0alice-secret") == b""
    assert server.complete and server.authorization_id == "alice"
    assert PlainServer({"alice": "s"}).evaluate(b"alice\0alice\0s") == b""
    for token in (b"\0alice\0wrong", b"\0bob\0alice-secret", b"bob\0alice\0alice-secret", b"\0alice",
                  b"\0\0", b"\0alice\0\xff"):
        with pytest.raises(AuthenticationFailed):
            PlainServer({"alice": "alice-secret"}).evaluate(token)


# -- JAAS --------------------------------------------------------------------------------------


def test_jaas_kafka_syntax() -> None:
    module = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
        '  username="admin" password="a\\"b" user_admin="x;y" user_bob=bare;')
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": 'a"b', "user_admin": "x;y", "user_bob": "bare"}


@pytest.mark.parametrize("text", ["", "Module required a=b", "Module bogus;", "Module required a=;",
                                  "A required; B required;", 'Module required a="unterminated;'])
def test_jaas_invalid(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas_config(text)


# -- principals of client certificates ---------------------------------------------------------


def test_principal_rules_as_kafka() -> None:
    dn = "CN=alice,OU=eng,O=Example,C=US"
    assert PrincipalMapper("DEFAULT").user_name(dn) == dn
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$2/L, DEFAULT")
    assert mapper.user_name("CN=Alice,OU=ENG,O=Example,C=US") == "alice@eng"
    assert mapper.user_name("CN=x") == "CN=x"  # falls through to DEFAULT
    assert PrincipalMapper("RULE:^CN=(.*?),.*$/$1/U").user_name(dn) == "ALICE"
    with pytest.raises(PrincipalMappingError):
        PrincipalMapper("RULE:^CN=(.*?),O=x$/$1/").user_name(dn)
    with pytest.raises(PrincipalMappingError):
        PrincipalMapper("RULE:broken")


# -- credentials in the metadata log -----------------------------------------------------------


def _upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> AlterUserScramCredentialsRequestScramCredentialUpsertion:
    return AlterUserScramCredentialsRequestScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=b"salt", salted_password=b"p" * 32)


def _applied(image: MetadataImage, records: list[Message]) -> MetadataImage:
    for record in records:
        image = apply(image, record, image.offset + 1)
    return image


def test_alter_and_describe_credentials() -> None:
    request = AlterUserScramCredentialsRequest(upsertions=[_upsert("alice"), _upsert("alice", 2), _upsert("bob", 1, 100),
                                                           _upsert("carol", 3), _upsert("", 1)])
    response, records = alter_credentials(request, MetadataImage())
    errors = {r.user: r.error_code for r in response.results}
    assert errors == {"alice": 0, "bob": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                      "carol": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "": ErrorCode.UNACCEPTABLE_CREDENTIAL}
    image = _applied(MetadataImage(), records)
    assert set(image.scram_credentials) == {("alice", 1), ("alice", 2)}
    described = describe_credentials(DescribeUserScramCredentialsRequest(users=None), image)
    assert [(r.user, sorted(i.mechanism for i in r.credential_infos)) for r in described.results] == [
        ("alice", [1, 2])]
    missing = describe_credentials(DescribeUserScramCredentialsRequest(users=[
        DescribeUserScramCredentialsRequestUserName(name="zed")]), image)
    assert missing.results[0].error_code == ErrorCode.RESOURCE_NOT_FOUND

    deletion = AlterUserScramCredentialsRequestScramCredentialDeletion
    response, records = alter_credentials(AlterUserScramCredentialsRequest(
        deletions=[deletion(name="alice", mechanism=1), deletion(name="zed", mechanism=1)],
        upsertions=[_upsert("dup"), _upsert("dup")]), image)
    errors = {r.user: r.error_code for r in response.results}
    assert errors == {"alice": 0, "zed": ErrorCode.RESOURCE_NOT_FOUND, "dup": ErrorCode.DUPLICATE_RESOURCE}
    assert set(_applied(image, records).scram_credentials) == {("alice", 2)}


def test_add_scram_argument() -> None:
    credential = parse_add_scram("SCRAM-SHA-512=[name=admin,password=\"s3cret\",iterations=8192]")
    assert (credential.mechanism, credential.name, credential.password, credential.iterations) == (
        "SCRAM-SHA-512", "admin", "s3cret", 8192)
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-256=[name=a]", "SCRAM-SHA-256=[name=a,password=b,"
                "iterations=10]", "SCRAM-SHA-256=[name=a,password=b,salt=x]"):
        with pytest.raises(ScramArgumentError):
            parse_add_scram(bad)
    request = upsertion_request([credential], lambda user, mechanism: False)
    assert request is not None and request.upsertions[0].iterations == 8192
    assert upsertion_request([credential], lambda user, mechanism: True) is None
