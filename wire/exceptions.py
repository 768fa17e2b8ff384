"""The exceptions the codec raises.

Malformed input of any kind raises :class:`DecodeError` (or a subclass), which
carries where it happened so the broker can log it and close the connection.
"""

from __future__ import annotations


class DecodeError(Exception):
    """Input bytes that do not form a valid message, record batch or frame."""

    def __init__(
        self,
        reason: str,
        offset: int = -1,
        api_key: int = -1,
        api_version: int = -1,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset
        self.api_key = api_key
        self.api_version = api_version

    def with_context(self, api_key: int, api_version: int) -> DecodeError:
        """Attach the message being decoded, unless a nested decode already did."""
        if self.api_key < 0:
            self.api_key = api_key
            self.api_version = api_version
        return self

    def __str__(self) -> str:
        where = []
        if self.api_key >= 0:
            where.append(f"api_key={self.api_key} version={self.api_version}")
        if self.offset >= 0:
            where.append(f"offset={self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class CorruptRecordError(DecodeError):
    """A record batch or legacy message set that is malformed (bad CRC, lengths, varints)."""


class DecompressionLimitError(CorruptRecordError):
    """Decompressed data would exceed the configured size limit (a decompression bomb)."""


class UnsupportedVersionError(Exception):
    """Asked to encode or decode a version a message does not have, or a field it lacks."""
