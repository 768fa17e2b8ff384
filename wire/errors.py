"""Kafka error codes: the project's only table of them.

Every code Apache Kafka 3.9 can put on the wire (its ``Errors`` enum), and the
Kafka 4 codes the broker answers with (INVALID_REGULAR_EXPRESSION), with the
same names and numbers, and the same retriable flag as the protocol guide's
error table (a code is retriable when Kafka's exception for it extends
``RetriableException``). Clients decide whether to retry from the code alone,
so a wrong flag here changes client behaviour.

Codes are never renumbered; Kafka only appends. Nothing outside this module
should write a bare error number.
"""

from __future__ import annotations

import enum
from typing import Final


class ErrorCode(enum.IntEnum):
    """A Kafka protocol error code, with its retriable flag and a short description."""

    _retriable: bool
    _description: str

    # The defaults only let type checkers accept ErrorCode(code), Enum's lookup by
    # value; every row below gives all three fields.
    def __new__(cls, code: int, retriable: bool = False, description: str = "") -> ErrorCode:
        member = int.__new__(cls, code)
        member._value_ = code
        member._retriable = retriable
        member._description = description
        return member

    @property
    def retriable(self) -> bool:
        """Whether a client may retry the request unchanged (Kafka's RetriableException)."""
        return self._retriable

    @property
    def description(self) -> str:
        """A one-line explanation of the error, suitable for logs and error messages."""
        return self._description

    @classmethod
    def for_code(cls, code: int) -> ErrorCode:
        """The member for ``code``; a code this table does not know is UNKNOWN_SERVER_ERROR."""
        return _BY_CODE.get(code, cls.UNKNOWN_SERVER_ERROR)

    # One row per code, as (code, retriable, description); kept one line each so
    # the table reads like Kafka's.
    # fmt: off
    UNKNOWN_SERVER_ERROR = (-1, False, "The server hit an unexpected error while handling the request.")
    NONE = (0, False, "No error.")
    OFFSET_OUT_OF_RANGE = (1, False, "The requested offset is outside the range of offsets the server holds.")
    CORRUPT_MESSAGE = (2, True, "A message failed its CRC check, has an invalid size, has a null key for a compacted topic, or is otherwise corrupt.")
    UNKNOWN_TOPIC_OR_PARTITION = (3, True, "This server does not host this topic-partition.")
    INVALID_FETCH_SIZE = (4, False, "The requested fetch size is invalid.")
    LEADER_NOT_AVAILABLE = (5, True, "The topic-partition has no leader right now, for example during a leader election.")
    NOT_LEADER_OR_FOLLOWER = (6, True, "This broker is not the leader (or, for replica requests, not a replica) of the topic-partition.")
    REQUEST_TIMED_OUT = (7, True, "The request timed out.")
    BROKER_NOT_AVAILABLE = (8, False, "The broker is not available.")
    REPLICA_NOT_AVAILABLE = (9, True, "The replica is not available for the requested topic-partition.")
    MESSAGE_TOO_LARGE = (10, False, "The request contains a message larger than the largest the server accepts.")
    STALE_CONTROLLER_EPOCH = (11, False, "The controller has moved to another broker.")
    OFFSET_METADATA_TOO_LARGE = (12, False, "The metadata string of the offset commit is too large.")
    NETWORK_EXCEPTION = (13, True, "The server disconnected before sending a response.")
    COORDINATOR_LOAD_IN_PROGRESS = (14, True, "The coordinator is still loading its state and cannot serve requests yet.")
    COORDINATOR_NOT_AVAILABLE = (15, True, "The coordinator is not available.")
    NOT_COORDINATOR = (16, True, "This broker is not the coordinator for the group or transactional id.")
    INVALID_TOPIC_EXCEPTION = (17, False, "The request names an invalid topic.")
    RECORD_LIST_TOO_LARGE = (18, False, "The request contains a record batch larger than the topic's segment size.")
    NOT_ENOUGH_REPLICAS = (19, True, "Rejected because fewer replicas are in sync than min.insync.replicas requires.")
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, True, "Written to the log, but to fewer in-sync replicas than required.")
    INVALID_REQUIRED_ACKS = (21, False, "The produce request has an invalid acks value.")
    ILLEGAL_GENERATION = (22, False, "The group generation id is not the current one.")
    INCONSISTENT_GROUP_PROTOCOL = (23, False, "The member's protocol type or protocols do not match the group's.")
    INVALID_GROUP_ID = (24, False, "The group id is invalid.")
    UNKNOWN_MEMBER_ID = (25, False, "The coordinator does not know this member id.")
    INVALID_SESSION_TIMEOUT = (26, False, "The session timeout is outside group.min.session.timeout.ms .. group.max.session.timeout.ms.")
    REBALANCE_IN_PROGRESS = (27, False, "The group is rebalancing; the member must rejoin.")
    INVALID_COMMIT_OFFSET_SIZE = (28, False, "The size of the offset commit data is invalid.")
    TOPIC_AUTHORIZATION_FAILED = (29, False, "Not authorized to access the topic.")
    GROUP_AUTHORIZATION_FAILED = (30, False, "Not authorized to access the group.")
    CLUSTER_AUTHORIZATION_FAILED = (31, False, "Not authorized for this cluster operation.")
    INVALID_TIMESTAMP = (32, False, "A message timestamp is outside the accepted range.")
    UNSUPPORTED_SASL_MECHANISM = (33, False, "The broker does not support the requested SASL mechanism.")
    ILLEGAL_SASL_STATE = (34, False, "The request is not valid in the current SASL state.")
    UNSUPPORTED_VERSION = (35, False, "The broker does not support this version of the API.")
    TOPIC_ALREADY_EXISTS = (36, False, "A topic with this name already exists.")
    INVALID_PARTITIONS = (37, False, "The number of partitions is invalid.")
    INVALID_REPLICATION_FACTOR = (38, False, "The replication factor is below 1 or above the number of available brokers.")
    INVALID_REPLICA_ASSIGNMENT = (39, False, "The replica assignment is invalid.")
    INVALID_CONFIG = (40, False, "The configuration is invalid.")
    NOT_CONTROLLER = (41, True, "This node is not the active controller.")
    INVALID_REQUEST = (42, False, "The request is malformed or not valid for this broker; the broker log has details.")
    UNSUPPORTED_FOR_MESSAGE_FORMAT = (43, False, "The message format on the broker does not support this request.")
    POLICY_VIOLATION = (44, False, "The request violates a configured policy.")
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False, "The broker received an out-of-order producer sequence number.")
    DUPLICATE_SEQUENCE_NUMBER = (46, False, "The broker received a duplicate producer sequence number.")
    INVALID_PRODUCER_EPOCH = (47, False, "The producer used an epoch older than the current one.")
    INVALID_TXN_STATE = (48, False, "The transactional operation is not valid in the transaction's current state.")
    INVALID_PRODUCER_ID_MAPPING = (49, False, "The producer id is not the one currently assigned to this transactional id.")
    INVALID_TRANSACTION_TIMEOUT = (50, False, "The transaction timeout exceeds transaction.max.timeout.ms.")
    CONCURRENT_TRANSACTIONS = (51, True, "Another operation on the same transaction is in progress.")
    TRANSACTION_COORDINATOR_FENCED = (52, False, "The transaction coordinator sending the markers is no longer the current one.")
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = (53, False, "Not authorized to use this transactional id.")
    SECURITY_DISABLED = (54, False, "Security features are disabled.")
    OPERATION_NOT_ATTEMPTED = (55, False, "The broker did not attempt this operation, because another in the same batch failed.")
    KAFKA_STORAGE_ERROR = (56, True, "A disk error occurred while accessing the log.")
    LOG_DIR_NOT_FOUND = (57, False, "The requested log directory is not in the broker's configuration.")
    SASL_AUTHENTICATION_FAILED = (58, False, "SASL authentication failed.")
    UNKNOWN_PRODUCER_ID = (59, False, "The broker has no state for this producer id, for example because its records expired.")
    REASSIGNMENT_IN_PROGRESS = (60, False, "A partition reassignment is in progress.")
    DELEGATION_TOKEN_AUTH_DISABLED = (61, False, "Delegation tokens are not enabled.")
    DELEGATION_TOKEN_NOT_FOUND = (62, False, "The delegation token was not found.")
    DELEGATION_TOKEN_OWNER_MISMATCH = (63, False, "The principal is not the owner or a renewer of the delegation token.")
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = (64, False, "Delegation token requests are not allowed on plaintext, one-way TLS or token-authenticated connections.")
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = (65, False, "Not authorized for this delegation token operation.")
    DELEGATION_TOKEN_EXPIRED = (66, False, "The delegation token has expired.")
    INVALID_PRINCIPAL_TYPE = (67, False, "The principal type is not supported.")
    NON_EMPTY_GROUP = (68, False, "The group is not empty.")
    GROUP_ID_NOT_FOUND = (69, False, "The group id does not exist.")
    FETCH_SESSION_ID_NOT_FOUND = (70, True, "The fetch session id was not found.")
    INVALID_FETCH_SESSION_EPOCH = (71, True, "The fetch session epoch is invalid.")
    LISTENER_NOT_FOUND = (72, True, "The leader has no listener matching the one the metadata request arrived on.")
    TOPIC_DELETION_DISABLED = (73, False, "Topic deletion is disabled.")
    FENCED_LEADER_EPOCH = (74, True, "The leader epoch in the request is older than the broker's.")
    UNKNOWN_LEADER_EPOCH = (75, True, "The leader epoch in the request is newer than the broker's.")
    UNSUPPORTED_COMPRESSION_TYPE = (76, False, "The client does not support the partition's compression type.")
    STALE_BROKER_EPOCH = (77, False, "The broker epoch has changed.")
    OFFSET_NOT_AVAILABLE = (78, True, "The new leader's high watermark has not caught up yet, so offsets may not be monotonic.")
    MEMBER_ID_REQUIRED = (79, False, "The member must rejoin with the member id the coordinator assigned.")
    PREFERRED_LEADER_NOT_AVAILABLE = (80, True, "The preferred leader is not available.")
    GROUP_MAX_SIZE_REACHED = (81, False, "The group has reached group.max.size.")
    FENCED_INSTANCE_ID = (82, False, "Another member with the same group.instance.id has joined with a different member id.")
    ELIGIBLE_LEADERS_NOT_AVAILABLE = (83, True, "No eligible leader is available for the partition.")
    ELECTION_NOT_NEEDED = (84, True, "The partition does not need a leader election.")
    NO_REASSIGNMENT_IN_PROGRESS = (85, False, "No partition reassignment is in progress.")
    GROUP_SUBSCRIBED_TO_TOPIC = (86, False, "Cannot delete a topic's offsets while the group is subscribed to it.")
    INVALID_RECORD = (87, False, "The broker's validation rejected a record.")
    UNSTABLE_OFFSET_COMMIT = (88, True, "There are pending transactional offsets; retry once they are resolved.")
    THROTTLING_QUOTA_EXCEEDED = (89, True, "The throttling quota has been exceeded.")
    PRODUCER_FENCED = (90, False, "A newer producer with the same transactional id has fenced this one.")
    RESOURCE_NOT_FOUND = (91, False, "The request refers to a resource that does not exist.")
    DUPLICATE_RESOURCE = (92, False, "The request refers to the same resource twice.")
    UNACCEPTABLE_CREDENTIAL = (93, False, "The requested credential does not meet the acceptance criteria.")
    INCONSISTENT_VOTER_SET = (94, False, "The sender or receiver of a voter request is not one of the expected voters.")
    INVALID_UPDATE_VERSION = (95, False, "The update version is invalid.")
    FEATURE_UPDATE_FAILED = (96, False, "Updating the finalized features failed with an unexpected server error.")
    PRINCIPAL_DESERIALIZATION_FAILURE = (97, False, "The forwarded request's principal could not be deserialized.")
    SNAPSHOT_NOT_FOUND = (98, False, "The requested snapshot was not found.")
    POSITION_OUT_OF_RANGE = (99, False, "The requested position is negative or beyond the end of the snapshot.")
    UNKNOWN_TOPIC_ID = (100, True, "This server does not host this topic id.")
    DUPLICATE_BROKER_REGISTRATION = (101, False, "This broker id is already registered.")
    BROKER_ID_NOT_REGISTERED = (102, False, "The broker id is not registered.")
    INCONSISTENT_TOPIC_ID = (103, True, "The topic id in the request does not match the log's topic id.")
    INCONSISTENT_CLUSTER_ID = (104, False, "The cluster id in the request does not match the server's.")
    TRANSACTIONAL_ID_NOT_FOUND = (105, False, "The transactional id was not found.")
    FETCH_SESSION_TOPIC_ID_ERROR = (106, True, "The fetch session used topic ids inconsistently.")
    INELIGIBLE_REPLICA = (107, False, "The proposed ISR contains an ineligible replica.")
    NEW_LEADER_ELECTED = (108, False, "The partition state was updated, but the leader has changed.")
    OFFSET_MOVED_TO_TIERED_STORAGE = (109, False, "The requested offset has moved to tiered storage.")
    FENCED_MEMBER_EPOCH = (110, False, "The member epoch is fenced; the member must give up its partitions and rejoin.")
    UNRELEASED_INSTANCE_ID = (111, False, "Another member still uses this instance id and must leave first.")
    UNSUPPORTED_ASSIGNOR = (112, False, "The group does not support this assignor or assignor version range.")
    STALE_MEMBER_EPOCH = (113, False, "The member epoch is stale; retry after the heartbeat returns the current epoch.")
    MISMATCHED_ENDPOINT_TYPE = (114, False, "The request was sent to the wrong type of endpoint.")
    UNSUPPORTED_ENDPOINT_TYPE = (115, False, "This endpoint type is not supported yet.")
    UNKNOWN_CONTROLLER_ID = (116, False, "The controller id is not known.")
    UNKNOWN_SUBSCRIPTION_ID = (117, False, "The telemetry push used an unknown or outdated subscription id.")
    TELEMETRY_TOO_LARGE = (118, False, "The telemetry push is larger than the broker accepts.")
    INVALID_REGISTRATION = (119, False, "The controller considers the broker registration invalid.")
    TRANSACTION_ABORTABLE = (120, False, "The transaction hit an error; the client can abort it and keep using the transactional id.")
    INVALID_RECORD_STATE = (121, False, "The record state is invalid, so the delivery acknowledgement failed.")
    SHARE_SESSION_NOT_FOUND = (122, True, "The share session was not found.")
    INVALID_SHARE_SESSION_EPOCH = (123, True, "The share session epoch is invalid.")
    FENCED_STATE_EPOCH = (124, False, "The share-group state epoch does not match the share coordinator's.")
    INVALID_VOTER_KEY = (125, False, "The voter key does not match the receiving replica's key.")
    DUPLICATE_VOTER = (126, False, "The voter is already in the voter set.")
    VOTER_NOT_FOUND = (127, False, "The voter is not in the voter set.")
    # Kafka 4.0
    INVALID_REGULAR_EXPRESSION = (128, False, "The regular expression is not valid.")
    # fmt: on


_BY_CODE: Final[dict[int, ErrorCode]] = {int(member): member for member in ErrorCode}
