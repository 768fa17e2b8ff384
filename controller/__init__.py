"""The metadata quorum: an ordered log of typed metadata records, a pure state
machine that applies them, and the controller service that writes them.

Imports ``wire`` only; never ``broker``.
"""
