"""Every frame real clients exchanged (``../shared/kafka-captures``) decodes, re-encodes
byte for byte, and agrees field by field with the reference decode beside it."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from tests.shared import CAPTURES, CapturedFrame, capture_files, read_capture
from wire.frame import peek_request, request_header_version, response_header_version
from wire.generated.header_request_header import RequestHeader
from wire.generated.header_response_header import ResponseHeader
from wire.generated.registry import API_SPECS
from wire.primitives import Message, Regions, as_memoryview

FILES = capture_files()
pytestmark = pytest.mark.skipif(not FILES, reason="../shared/kafka-captures is absent")


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", s).lower()


def agree(ours: Any, ref: Any, path: str) -> None:
    """Compares a decoded value with the reference decode's JSON rendering of it."""
    if isinstance(ref, dict) and "bytes" in ref and ("hex" in ref or "batches" in ref or "n_batches" in ref):
        assert ours is not None, path
        assert len(ours) == ref["bytes"], path
        if "hex" in ref:
            assert bytes(ours)[:64].hex() == ref["hex"][: 128], path
        return
    if isinstance(ref, dict):
        for key, value in ref.items():
            if key.startswith("_"):
                continue
            attr = snake(key)
            if not hasattr(ours, attr):
                attr += "_"
            assert hasattr(ours, attr), f"{path}.{key} missing"
            agree(getattr(ours, attr), value, f"{path}.{key}")
        return
    if isinstance(ref, list):
        assert ours is not None, path
        cut = bool(ref) and isinstance(ref[-1], str) and ref[-1].startswith("... ")
        if cut:
            ref = ref[:-1]  # the reference decode cut a long array here
            assert len(ours) > len(ref), path
        elif len(ref) < 50:
            assert len(ours) == len(ref), path
        else:
            assert len(ours) >= len(ref), path
        for i, item in enumerate(ref):
            agree(ours[i], item, f"{path}[{i}]")
        return
    if isinstance(ours, uuid.UUID):
        assert ours.hex == str(ref).replace("-", ""), path
        return
    if isinstance(ours, float):
        assert ours == pytest.approx(ref), path
        return
    assert ours == ref, f"{path}: {ours!r} != {ref!r}"


def reencode(header: Message, hv: int, body: Message, version: int) -> bytes:
    w = bytearray()
    regions: Regions = []
    header.encode_into(w, hv, regions)
    body.encode_into(w, version, regions)
    assert not regions
    return bytes(w)


def check_frame(cf: CapturedFrame) -> str:
    """Returns 'ok', or a reason the frame is exempt from byte identity."""
    meta = cf.meta
    key, version = meta["api_key"], meta["api_version"]
    spec = API_SPECS[key]
    buf = as_memoryview(cf.frame)[4:]
    assert int.from_bytes(cf.frame[:4], "big") == len(buf)
    in_range = spec.min_version <= version <= spec.max_version
    if cf.direction == "C" and not in_range:
        pre = peek_request(buf)  # a probe of a version no schema has: route only
        assert (pre.api_key, pre.api_version, pre.correlation_id) == (key, version, meta["corr"])
        return "unsupported-version"
    if cf.direction == "C":
        hv = request_header_version(key, version)
        header, pos = RequestHeader.decode_at(buf, 0, hv)
        assert header.request_api_key == key and header.request_api_version == version
        assert header.correlation_id == meta["corr"]
        body, end = spec.request.decode_at(buf, pos, version)
    else:
        hv = response_header_version(key, version)
        header, pos = ResponseHeader.decode_at(buf, 0, hv)
        assert header.correlation_id == meta["corr"]
        if key == 18 and meta["body"].get("ErrorCode") == 35:
            version = 0  # an unsupported ApiVersions request is answered in v0
        elif not in_range:
            version = spec.max_version  # Tansu answers v127 probes with its newest body
        body, end = spec.response.decode_at(buf, pos, version)
    agree(body, meta["body"], f"{cf.path.parent.name}/{cf.path.name}#{cf.index}")
    again = reencode(header, hv, body, version)
    if again == bytes(buf[:end]):
        assert end == len(buf) or cf.direction == "C", "trailing bytes after a response"
        return "ok" if end == len(buf) else "trailing"
    # Client requests are always byte-identical. For responses (from Tansu), re-decode:
    # the only allowed difference is default-valued tagged fields the
    # peer wrote and Cormorant (like Kafka) leaves out.
    spec_cls = spec.request if cf.direction == "C" else spec.response
    assert cf.direction == "S", "a client request did not re-encode byte for byte"
    redecoded = spec_cls.decode(again[pos:], version)
    assert redecoded == body, "re-encode changed the message"
    assert len(again) < end, "re-encode is not byte-identical"
    return "default-tags"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CAPTURES).with_suffix("")))
def test_capture_file(path: Any) -> None:
    outcomes: dict[str, int] = {}
    for cf in read_capture(path):
        if "api_key" not in cf.meta:
            continue
        outcome = check_frame(cf)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("ok", 0) > 0
