"""Which network NCCL used between the nodes, from its INFO lines, and who fell back to sockets.

NCCL picks its inter-node transport when a communicator is made: InfiniBand or RoCE (its `IB`
transport), a network plugin (`AWS Libfabric`, `OFI`, ...) or, when neither loads or finds a
device, plain TCP (`Socket`), silently: the job runs, slower. On a GPU screen the tasks ask
NCCL for its INFO lines of INIT and NET into files in the screen's folder (`nccl-logs/`:
NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET, NCCL_DEBUG_FILE), and this module reads there,
per node (the lines' host, which the tasks recorded next to their node's name):

    <host>:<pid>:<tid> [<dev>] NCCL INFO Using network <name>        (init.cc, every comm)
    ... NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/<name>/<dev>...   (transport/net.cc)
    ... NCCL INFO NET/Plugin: ...                                    (a plugin, or why none)

(NVIDIA/nccl src/init.cc, src/transport/net.cc, src/plugin; NCCL may put a time stamp in
front of the host.) A node's inter-node transport is what its channels over the network used
(`via NET/<name>`), else the network its communicators were given. Named:
- a node whose inter-node traffic went over `Socket` while other nodes use a fabric: kind
  `node`, figure `transport`; it is a suspect;
- the cluster, when every node that says went over `Socket`: kind `cluster`.
GPU mode only (the CPU path's gloo is not NCCL); a node without lines is `unknown`, named
for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from llmb.container import screenrun
from llmb.llmbrun.screen.document import Named, NodeTransport
from llmb.shared import files

LOGS_DIR = screenrun.NCCL_LOGS_DIR
SOCKET = "Socket"
MAX_LOG_BYTES = 16 << 20
ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
# Each expression runs in time linear in its line: numbers and names bounded (a host name is at
# most 255 characters, a pid, tid or device at most 10 digits), no two repetitions side by side
# over the same characters (the message's trailing blanks are stripped after the match, not by
# it), and a channel's `via NET/<name>/<dev>` read from the message's start.
_LINE = re.compile(r"(?:^|\s)([^\s:]{1,255}):\d{1,10}:\d{1,10} \[\d{1,10}\] NCCL INFO (.*)")
_USING = re.compile(r"Using network (.+)")
_CHANNEL = re.compile(r"^Channel \d{1,10}/\d{1,10} : .* via NET/([^/]{1,255})/\d")
_PLUGIN = re.compile(r"NET/Plugin\s*(?::\s*)?(.*)")


class Seen(TypedDict):
    """What a node's NCCL said: the networks its communicators were given, those its
    network channels used, what it said of a plugin."""

    networks: set[str]
    channels: set[str]
    plugin: str | None


def read(folder: Path, hosts: Mapping[str, str]) -> dict[str, Seen]:
    """Per node (hosts: host name -> node name; an unknown host stands for itself): the
    networks its communicators were given, those its network channels used, what it said of
    a plugin."""
    out: dict[str, Seen] = {}
    where = folder / LOGS_DIR
    for path in sorted(where.glob("*.log")) if where.is_dir() else []:
        try:
            text = files.read_bounded(path, MAX_LOG_BYTES).decode("utf-8", "replace")
        except files.FileRefused:
            continue
        for line in text.splitlines():
            if (m := _LINE.search(line)) is None:
                continue
            node = out.setdefault(hosts.get(m.group(1), m.group(1)),
                                  Seen(networks=set(), channels=set(), plugin=None))
            message = m.group(2).rstrip()
            if found := _USING.fullmatch(message):
                node["networks"].add(found.group(1))
            elif found := _CHANNEL.search(message):
                node["channels"].add(found.group(1))
            elif found := _PLUGIN.match(message):
                node["plugin"] = found.group(1)[:200]
    return out


def transport_of(seen: Seen) -> str:
    """A node's inter-node transport: its network channels', else its communicators'."""
    used = sorted(seen["channels"]) or sorted(seen["networks"])
    return "+".join(used) if used else "unknown"


def summary(read_out: Mapping[str, Seen], nodes: Sequence[str]) -> dict[str, NodeTransport]:
    """screen.json's `transport`: per node screened, its transport and what says so."""
    out = {}
    for node in nodes:
        seen = read_out.get(node)
        out[node] = NodeTransport(transport=transport_of(seen) if seen else "unknown",
                                  networks=sorted(seen["networks"]) if seen else [],
                                  channels=sorted(seen["channels"]) if seen else [],
                                  plugin=seen["plugin"] if seen else None)
    return out


def _socket_only(entry: NodeTransport) -> bool:
    return entry["transport"] == SOCKET


def named(transport: Mapping[str, NodeTransport]) -> list[Named]:
    """The nodes that fell back to sockets while others use a fabric, or the cluster."""
    known = {n: e for n, e in transport.items() if e["transport"] != "unknown"}
    sockets = sorted(n for n, e in known.items() if _socket_only(e))
    if len(known) < 2 or not sockets:
        return []
    if len(sockets) == len(known):
        return [_entry("cluster", "cluster", f"every node's traffic to other nodes went over "
                       f"TCP sockets (NCCL's {SOCKET} transport): no InfiniBand/RoCE device or "
                       "network plugin was used" + _plugin_note(known))]
    fabric = sorted({e["transport"] for e in known.values() if not _socket_only(e)})
    others = len(known) - len(sockets)
    return [_entry("node", node, f"its traffic to other nodes fell back to TCP sockets "
                   f"(NCCL's {SOCKET} transport) while {others} other node(s) use "
                   f"{', '.join(fabric)}" + _plugin_note({node: known[node]}))
            for node in sockets]


def _plugin_note(entries: Mapping[str, NodeTransport]) -> str:
    said = sorted({str(e["plugin"]) for e in entries.values() if e.get("plugin")})
    return f"; NCCL said of its network plugin: {said[0]}" if said else ""


def _entry(kind: str, name: str, why: str) -> Named:
    return Named(kind=kind, name=name, figure="transport", value=None, floor=None,
                 expected=None, peers_median=None, why=why)
