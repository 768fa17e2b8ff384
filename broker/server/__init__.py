"""The request path: listeners and connections (``network``), routing frames to handlers and
back (``dispatch``), the error codes a response carries (``response_errors``), fetch
sessions (``fetch_sessions``, KIP-227).
"""
