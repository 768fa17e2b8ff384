"""The generator of ``wire/generated/`` (run as ``python scripts/gen_wire.py``)."""
