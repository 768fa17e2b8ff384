"""Listeners and addresses: ``listeners``, ``advertised.listeners``, the security
protocol map, ``controller.quorum.voters``, and the KRaft checks that tie them to
``process.roles`` (Kafka's ``KafkaConfig.validateValues``), with Kafka's messages.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from config.types import INTEGER_RE, LIST_SEPARATOR_RE, ConfigError, TypedValues, invalid


class SecurityProtocol(enum.Enum):
    """Kafka's security protocols, as named in listener.security.protocol.map."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


_HOST_PORT_RE: Final = re.compile(r"\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)")


def _port(key: str, text: str, entry: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise invalid(key, entry, f"port {port} is outside 0..65535")
    return port


@dataclass(frozen=True, slots=True)
class HostPort:
    """A plain ``host:port`` address; an empty host means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host_port(key: str, text: str) -> HostPort | None:
    if not text:
        return None
    match = _HOST_PORT_RE.fullmatch(text)
    if match is None:
        raise invalid(key, text, "expected host:port")
    return HostPort(match.group(1), _port(key, match.group(2), text))


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``name://host:port``. An empty host means every interface; port 0, any free port."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    """One voter of the metadata quorum, from controller.quorum.voters (``id@host:port``)."""

    node_id: int
    host: str
    port: int


_LISTENER_RE: Final = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")


def csv(text: str | None) -> list[str]:
    # Kafka's Csv.parseCsvList: split at commas with surrounding blanks, drop empties.
    if not text:
        return []
    return [item for item in LIST_SEPARATOR_RE.split(text.strip()) if item]


def _parse_security_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    key = "listener.security.protocol.map"
    result: dict[str, SecurityProtocol] = {}
    for entry in csv(text):
        name, colon, protocol = entry.rpartition(":")
        if not colon or not name.strip():
            raise invalid(key, text, f"entry {entry!r} is not NAME:PROTOCOL")
        try:
            result[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(
                key, f"Invalid security protocol `{protocol.strip()}` defined in {key}"
            ) from None
    return result


def _parse_listeners(
    key: str, text: str, protocols: Mapping[str, SecurityProtocol], distinct_ports: bool
) -> tuple[Listener, ...]:
    listeners: list[Listener] = []
    for entry in csv(text):
        match = _LISTENER_RE.fullmatch(entry)
        if match is None:
            raise invalid(key, text, f"Unable to parse {entry} to a broker endpoint")
        name = match.group(1).strip().upper()
        if not name:
            raise invalid(key, text, "The provided listener name is null or empty string")
        protocol = protocols.get(name)
        if protocol is None:
            raise invalid(key, text, f"No security protocol defined for listener {name}")
        listeners.append(
            Listener(name, match.group(2), _port(key, match.group(3), entry), protocol)
        )
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise invalid(key, text, f"Each listener must have a different name, listeners: {text}")
    if distinct_ports:
        _check_distinct_ports(key, text, listeners)
    return tuple(listeners)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host.split("%")[0]).version
    except ValueError:
        return None


def _check_distinct_ports(key: str, text: str, listeners: list[Listener]) -> None:
    # Port 0 may repeat (each gets its own ephemeral port); otherwise a port may be
    # shared only by exactly one IPv4 and one IPv6 literal address, as in Kafka.
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, sharing in by_port.items():
        if len(sharing) == 1:
            continue
        versions = sorted(_ip_version(listener.host) or 0 for listener in sharing)
        if versions != [4, 6]:
            raise invalid(
                key,
                text,
                f"Each listener must have a different port unless exactly one has an IPv4 "
                f"and the other an IPv6 address, port: {port}",
            )


def parse_voters(text: tuple[str, ...]) -> tuple[QuorumVoter, ...]:
    key = "controller.quorum.voters"
    voters: list[QuorumVoter] = []
    for entry in text:
        node, at, address = entry.partition("@")
        match = _HOST_PORT_RE.fullmatch(address) if at and "@" not in address else None
        if match is None or not INTEGER_RE.fullmatch(node.strip()) or not match.group(1):
            raise invalid(
                key, ",".join(text), f"entry {entry!r} is not in the form {{id}}@{{host}}:{{port}}"
            )
        host = match.group(1)
        if host == "0.0.0.0":
            raise invalid(key, ",".join(text), f"Host string ({host}) is not routeable")
        voters.append(QuorumVoter(int(node), host, _port(key, match.group(2), entry)))
    ids = [voter.node_id for voter in voters]
    if len(set(ids)) != len(ids):
        raise invalid(key, ",".join(text), "a node id appears more than once")
    return tuple(voters)


def require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def _effective_protocol_map(
    raw: Mapping[str, str], values: TypedValues, controller_names: tuple[str, ...]
) -> dict[str, SecurityProtocol]:
    protocols = _parse_security_protocol_map(values.str_of("listener.security.protocol.map"))
    if "listener.security.protocol.map" in raw:
        return protocols
    # As Kafka in KRaft mode: with the default map, controller listener names map to
    # PLAINTEXT unless some listener already uses TLS or SASL.
    listener_names = [
        entry.split(":", 1)[0].strip().upper() for entry in csv(values.str_of("listeners"))
    ]
    secured = {"SSL", "SASL_PLAINTEXT", "SASL_SSL"}
    if secured.isdisjoint(controller_names) and secured.isdisjoint(listener_names):
        for name in controller_names:
            protocols.setdefault(name, SecurityProtocol.PLAINTEXT)
    return protocols


@dataclass(frozen=True, slots=True)
class Network:
    protocols: dict[str, SecurityProtocol]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    inter_broker_listener_name: str


def resolve_network(
    raw: Mapping[str, str], values: TypedValues, controller_names: tuple[str, ...]
) -> Network:
    protocols = _effective_protocol_map(raw, values, controller_names)
    listeners = _parse_listeners(
        "listeners", values.str_of("listeners"), protocols, distinct_ports=True
    )
    advertised_text = values.opt_str_of("advertised.listeners")
    advertised_all = (
        listeners
        if advertised_text is None
        else _parse_listeners(
            "advertised.listeners", advertised_text, protocols, distinct_ports=False
        )
    )
    for listener in advertised_all:
        require(
            listener.host != "0.0.0.0",
            "advertised.listeners",
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address.",
        )

    inter_broker_name = values.opt_str_of("inter.broker.listener.name")
    if inter_broker_name is not None:
        require(
            "security.inter.broker.protocol" not in raw,
            "inter.broker.listener.name",
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
        )
        inter_broker_name = inter_broker_name.upper()
        require(
            bool(inter_broker_name),
            "inter.broker.listener.name",
            "The provided listener name is null or empty string",
        )
        require(
            inter_broker_name in protocols,
            "inter.broker.listener.name",
            f"Listener with name {inter_broker_name} defined in inter.broker.listener.name not found in "
            "listener.security.protocol.map.",
        )
    else:
        inter_broker_name = values.str_of("security.inter.broker.protocol")
    return Network(
        protocols=protocols,
        listeners=listeners,
        # Clients are never told about controller listeners.
        advertised_listeners=tuple(
            listener for listener in advertised_all if listener.name not in controller_names
        ),
        inter_broker_listener_name=inter_broker_name,
    )


def check_roles(
    process_roles: tuple[str, ...],
    node_id: int,
    voters: tuple[QuorumVoter, ...],
    controller_names: tuple[str, ...],
    network: Network,
) -> None:
    # Kafka's KRaft checks (KafkaConfig.validateValues), with one relaxation: a
    # node running the controller role may leave controller.listener.names empty,
    # because Cormorant's quorum does not need a Kafka listener of its own.
    is_broker = "broker" in process_roles
    is_controller = "controller" in process_roles
    voter_ids = {voter.node_id for voter in voters}
    listener_names = {listener.name for listener in network.listeners}
    if is_controller:
        require(
            not voters or node_id in voter_ids,
            "controller.quorum.voters",
            f"If process.roles contains the 'controller' role, the node id {node_id} must be included in "
            f"the set of voters controller.quorum.voters={sorted(voter_ids)}",
        )
        require(
            all(name in listener_names for name in controller_names),
            "controller.listener.names",
            "controller.listener.names must only contain values appearing in the 'listeners' configuration "
            "when running the KRaft controller role",
        )
    if is_controller and not is_broker:
        require(
            bool(controller_names),
            "controller.listener.names",
            "controller.listener.names must contain at least one value appearing in the 'listeners' "
            "configuration when running the KRaft controller role",
        )
        require(
            listener_names <= set(controller_names),
            "listeners",
            "The listeners config must only contain KRaft controller listeners from "
            "controller.listener.names when process.roles=controller",
        )
    if is_broker and not is_controller:
        require(
            bool(voters),
            "controller.quorum.voters",
            "A broker-only node needs controller.quorum.voters to find the controllers",
        )
        require(
            node_id not in voter_ids,
            "controller.quorum.voters",
            f"If process.roles contains just the 'broker' role, the node id {node_id} must not be included "
            f"in the set of voters controller.quorum.voters={sorted(voter_ids)}",
        )
        require(
            bool(controller_names),
            "controller.listener.names",
            "controller.listener.names must contain at least one value when running KRaft with just the broker role",
        )
        require(
            not set(controller_names) & listener_names,
            "controller.listener.names",
            "controller.listener.names must not contain a value appearing in the 'listeners' configuration "
            "when running KRaft with just the broker role",
        )
        for name in controller_names:
            require(
                name in network.protocols,
                "controller.listener.names",
                f"Controller listener with name {name} defined in controller.listener.names not found in "
                "listener.security.protocol.map",
            )
    if is_broker:
        advertised_names = {listener.name for listener in network.advertised_listeners}
        require(
            bool(advertised_names),
            "advertised.listeners",
            "There must be at least one broker advertised listener. Perhaps all listeners appear in "
            "controller.listener.names?",
        )
        require(
            network.inter_broker_listener_name in advertised_names,
            "inter.broker.listener.name",
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
            f"options based on currently configured listeners are {','.join(sorted(advertised_names))}",
        )
        require(
            advertised_names <= listener_names,
            "advertised.listeners",
            "advertised.listeners listener names must be equal to or a subset of the ones defined in "
            f"listeners. Found {','.join(sorted(advertised_names))}. The valid options based on the current "
            f"configuration are {','.join(sorted(listener_names))}",
        )

