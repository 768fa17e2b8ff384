"""Leader/follower replication: follower fetchers and the leader's ISR upkeep."""
