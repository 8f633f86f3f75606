"""NCCL's INFO lines, generated from the formats of NVIDIA/nccl's source (no copied output), for
the screen's reading of which network NCCL used between nodes (llmb.llmbrun.screen.transport).

Each line is `[time stamp ]<host>:<pid>:<tid> [<cuda device>] NCCL INFO <message>` (src/debug.cc;
the time stamp only where NCCL_DEBUG_TIMESTAMP_FORMAT asks). The messages:
- src/transport/net_ib/init.cc: "NET/IB : Using [0]mlx5_0:1/IB ... ; OOB <if>:<addr>"
- src/transport/net_socket.cc:  "NET/Socket : Using [0]<if>:<addr>"
- src/plugin (loading a plugin): "NET/Plugin: Loaded net plugin <name> (v<N>)", or, where none
  is found, "NET/Plugin: Could not find: <library names>"
- src/init.cc:                  "Using network <name>" (every communicator)
- src/transport/net.cc:         "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/<name>/<dev>
                                 [/GDRDMA]" for a channel over the network between nodes
- src/transport/p2p.cc:         "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/CUMEM" inside one
"""

from __future__ import annotations

from pathlib import Path

from llmb.container import screenrun

PLUGIN_MISSING = "NET/Plugin: Could not find: libnccl-net.so."


def line(host: str, pid: int, dev: int, message: str, stamp: str | None = None) -> str:
    prefix = f"[{stamp}] " if stamp else ""
    return f"{prefix}{host}:{pid}:{pid + 7} [{dev}] NCCL INFO {message}"


def net_lines(network: str, node_index: int) -> list[str]:
    """What NCCL says while it chooses the network: the devices it found, the plugin."""
    addr = f"10.0.{node_index}.1<0>"
    if network == "IB":
        return [PLUGIN_MISSING, "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB "
                f"ib0:{addr}"]
    if network == "Socket":
        return [PLUGIN_MISSING, f"NET/Socket : Using [0]eth0:{addr}"]
    return [f"NET/Plugin: Loaded net plugin {network} (v8)"]


def task_log(host: str, rank: int, dev: int, network: str, node_index: int,
             peers: list[int], stamp: str | None = None) -> str:
    """One task's log: its network, a channel to a GPU of its own node, one to each peer
    rank on another node."""
    pid = 4000 + rank
    messages = [*net_lines(network, node_index), f"Using network {network}",
                f"Channel 00/0 : {rank}[{dev}] -> {rank + 1}[{dev + 1}] via P2P/CUMEM"]
    messages += [f"Channel {c:02d}/0 : {rank}[{dev}] -> {peer}[{dev}] [send] via "
                 f"NET/{network}/{dev}" + ("/GDRDMA" if network == "IB" else "")
                 for c, peer in enumerate(peers)]
    return "\n".join(line(host, pid, dev, m, stamp) for m in messages) + "\n"


def write_logs(folder: Path, nodes: list[str], per_node: int, networks: dict[str, str],
               host_of: object = None, stamp: str | None = None) -> None:
    """Every task's log under the screen's nccl-logs/, as the tasks leave them: networks[node]
    is the network that node used (default IB); host_of(node) its host name."""
    where = folder / screenrun.NCCL_LOGS_DIR
    where.mkdir(parents=True, exist_ok=True)
    name = host_of if callable(host_of) else (lambda n: n)
    for i, node in enumerate(nodes):
        for local in range(per_node):
            rank = i * per_node + local
            peers = [(rank + per_node) % (len(nodes) * per_node)] if len(nodes) > 1 else []
            (where / f"rank-{rank:05d}.log").write_text(task_log(
                str(name(node)), rank, local, networks.get(node, "IB"), i, peers, stamp))
