"""The broker's side of the cluster: the roles of a node (``cluster_mode``), the channel to
the active controller (``controller_channel``), the replica of the metadata log
(``metadata_follower``), requests to other brokers (``peers``) and the controller calls
forwarded from a broker-only node (``remote_controller``, ``feature_requests``).
"""
