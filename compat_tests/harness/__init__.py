"""Harness for the compatibility suite: broker processes and one driver per client.

Nothing here imports the broker: the suite talks to it over the socket only.
"""
