"""Handlers of the controller listener (``controller.listener.names``): the APIs brokers and
tools send to a KRaft controller, one module per API key as in ``broker/handlers``.

Only nodes with the controller role serve them. Changes are answered NOT_CONTROLLER
(41) by every controller but the active one; the broker's channel then finds the
active controller and retries.
"""

from __future__ import annotations

from types import ModuleType


def all_controller_handlers() -> list[ModuleType]:
    from broker.controller_handlers import (
        h01_fetch,
        h18_api_versions,
        h19_create_topics,
        h20_delete_topics,
        h30_create_acls,
        h31_delete_acls,
        h33_alter_configs,
        h37_create_partitions,
        h43_elect_leaders,
        h44_incremental_alter_configs,
        h45_alter_partition_reassignments,
        h49_alter_client_quotas,
        h51_alter_user_scram_credentials,
        h55_describe_quorum,
        h56_alter_partition,
        h57_update_features,
        h59_fetch_snapshot,
        h62_broker_registration,
        h63_broker_heartbeat,
        h67_allocate_producer_ids,
    )

    return [
        h01_fetch,
        h18_api_versions,
        h19_create_topics,
        h20_delete_topics,
        h30_create_acls,
        h31_delete_acls,
        h33_alter_configs,
        h37_create_partitions,
        h43_elect_leaders,
        h44_incremental_alter_configs,
        h45_alter_partition_reassignments,
        h49_alter_client_quotas,
        h51_alter_user_scram_credentials,
        h55_describe_quorum,
        h57_update_features,
        h56_alter_partition,
        h59_fetch_snapshot,
        h62_broker_registration,
        h63_broker_heartbeat,
        h67_allocate_producer_ids,
    ]
