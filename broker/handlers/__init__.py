"""One module per Kafka API: decode is done, call the domain, build the response.

Each module opens with the API key and the version range Cormorant supports.
"""

from __future__ import annotations

from types import ModuleType


def all_handlers() -> list[ModuleType]:
    from broker.handlers import (
        h00_produce,
        h01_fetch,
        h02_list_offsets,
        h03_metadata,
        h18_api_versions,
        h19_create_topics,
        h20_delete_topics,
        h21_delete_records,
        h23_offset_for_leader_epoch,
        h32_describe_configs,
        h33_alter_configs,
        h35_describe_log_dirs,
        h37_create_partitions,
        h44_incremental_alter_configs,
        h60_describe_cluster,
        h75_describe_topic_partitions,
    )

    return [
        h00_produce,
        h01_fetch,
        h02_list_offsets,
        h03_metadata,
        h18_api_versions,
        h19_create_topics,
        h20_delete_topics,
        h21_delete_records,
        h23_offset_for_leader_epoch,
        h32_describe_configs,
        h33_alter_configs,
        h35_describe_log_dirs,
        h37_create_partitions,
        h44_incremental_alter_configs,
        h60_describe_cluster,
        h75_describe_topic_partitions,
    ]
