"""SCRAM credentials in the metadata log: Kafka's ScramControlManager checks and records.

AlterUserScramCredentials carries salted passwords (the client salts and hashes); the
controller keeps only the salt, StoredKey, ServerKey and iterations. A user with any
invalid change gets that error and none of its changes are written, as in Kafka.
"""

from __future__ import annotations

from collections import Counter

from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    credential_from_salted_password,
)
from controller.image import MetadataImage
from wire.errors import ErrorCode
from wire.generated.api_050_describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponseCredentialInfo,
    DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult,
)
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResponseAlterUserScramCredentialsResult,
)
from wire.generated.metadata.rec_011_user_scram_credential_record import UserScramCredentialRecord
from wire.generated.metadata.rec_022_remove_user_scram_credential_record import (
    RemoveUserScramCredentialRecord,
)
from wire.primitives import Message

_Result = AlterUserScramCredentialsResponseAlterUserScramCredentialsResult


def alter_credentials(
    request: AlterUserScramCredentialsRequest, image: MetadataImage
) -> tuple[AlterUserScramCredentialsResponse, list[Message]]:
    """The response and the records of an AlterUserScramCredentials request against ``image``."""
    seen = Counter((d.name, d.mechanism) for d in request.deletions)
    seen.update((u.name, u.mechanism) for u in request.upsertions)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    records: dict[str, list[Message]] = {}
    users: list[str] = []

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for deletion in request.deletions:
        user = deletion.name
        users.append(user)
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif deletion.mechanism not in MECHANISM_NAMES:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif seen[(user, deletion.mechanism)] > 1:
            fail(user, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        elif (user, deletion.mechanism) not in image.scram_credentials:
            fail(user, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        else:
            records.setdefault(user, []).append(RemoveUserScramCredentialRecord(name=user, mechanism=deletion.mechanism))
    for upsertion in request.upsertions:
        user = upsertion.name
        users.append(user)
        mechanism = MECHANISM_NAMES.get(upsertion.mechanism)
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif seen[(user, upsertion.mechanism)] > 1:
            fail(user, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        elif upsertion.iterations < MIN_ITERATIONS:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif upsertion.iterations > MAX_ITERATIONS:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not upsertion.salt or not upsertion.salted_password:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        else:
            credential = credential_from_salted_password(mechanism, upsertion.salted_password, upsertion.salt,
                                                         upsertion.iterations)
            records.setdefault(user, []).append(UserScramCredentialRecord(
                name=user, mechanism=upsertion.mechanism, salt=credential.salt, stored_key=credential.stored_key,
                server_key=credential.server_key, iterations=credential.iterations))
    results: list[_Result] = []
    written: list[Message] = []
    for user in dict.fromkeys(users):
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append(_Result(user=user, error_code=code, error_message=message))
        if code == ErrorCode.NONE:
            written += records.get(user, [])
    return AlterUserScramCredentialsResponse(results=results), written


def describe_credentials(
    request: DescribeUserScramCredentialsRequest, image: MetadataImage
) -> DescribeUserScramCredentialsResponse:
    by_user: dict[str, list[DescribeUserScramCredentialsResponseCredentialInfo]] = {}
    for (user, mechanism), credential in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append(DescribeUserScramCredentialsResponseCredentialInfo(
            mechanism=mechanism, iterations=credential.iterations))
    result = DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult
    if request.users is None or not request.users:
        return DescribeUserScramCredentialsResponse(results=[
            result(user=user, credential_infos=infos) for user, infos in by_user.items()])
    counts = Counter(u.name for u in request.users)
    out = []
    for name in dict.fromkeys(u.name for u in request.users):
        if counts[name] > 1:
            out.append(result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                              error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                            f"single request: {name}"))
        elif name not in by_user:
            out.append(result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                              error_message=f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            out.append(result(user=name, credential_infos=by_user[name]))
    return DescribeUserScramCredentialsResponse(results=out)
