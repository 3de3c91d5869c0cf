"""Real Redis Cluster and Sentinel sets for the tests and the benches: each node a
``RedisServer`` (tests/support/redis_server.py: the embedded Valkey server) on a free port under
its own directory. Plain blocking code (subprocesses and the sync redis-py client): usable from
pytest fixtures, ``asyncio.to_thread`` and scripts alike.

    with LocalCluster(Path("/tmp/c")) as cluster:      # 3 primaries, all 16384 slots assigned
        cluster.url                                      # redis://127.0.0.1:<port>/0, any node
        cluster.migrate_slot(slot, cluster.ports[1])     # as redis-cli --cluster reshard does

    with LocalSentinel(Path("/tmp/s")) as sentinel:     # master + replica + 2 sentinels
        sentinel.sentinels, sentinel.master_name         # ["127.0.0.1:<port>", …], "xgwmaster"
        sentinel.failover()                              # SENTINEL FAILOVER; the new master's port

How a cluster is made (the Redis cluster tutorial, https://redis.io/docs/latest/operate/oss_and_
stack/management/scaling/, and redis-cli's ``--cluster create`` in src/redis-cli.c): each node
runs with ``cluster-enabled yes``; every node gets a distinct config epoch (CLUSTER
SET-CONFIG-EPOCH, as redis-cli does, so no epoch collision has to be resolved), its contiguous
third of the slots (CLUSTER ADDSLOTS), and meets the first node (CLUSTER MEET); the cluster is
ready when every node reports ``cluster_state:ok`` and the same slot map. No ``redis-cli``
needed (Valkey keeps these commands).
"""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.crc import key_slot

from tests.support.redis_server import RedisServer, redis_executable

SLOTS = 16384


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(count: int) -> list[int]:
    """Free ports whose cluster bus port (port + 10000, Redis' default) is free too. Picked from
    20000-44999 so the bus port stays below 65536 and out of the kernel's ephemeral range."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 45000)
        if port in ports or port == 6379:
            continue
        if _bindable(port) and _bindable(port + 10000):
            ports.append(port)
    return ports


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError, OSError):
            last = check()
            if last:
                return last
        time.sleep(0.05)
    raise RuntimeError(f"{what} within {timeout} s (last: {last!r})")


class LocalCluster:
    """A Redis Cluster of ``primaries`` primaries (no replicas) on free ports under ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        primaries: int = 3,
        node_timeout_ms: int = 3000,
        executable: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.executable = executable or redis_executable()
        self.ports = cluster_ports(primaries)
        self.servers = [
            RedisServer(
                workdir / f"node-{port}",
                port=port,
                executable=self.executable,
                extra=[
                    *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                    *("--cluster-node-timeout", str(node_timeout_ms)),
                ],
            )
            for port in self.ports
        ]

    # --- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """A URL naming one node (any node will do for a cluster client)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}/0" for p in self.ports]

    def node(self, port: int) -> redis.Redis:
        """A plain (not cluster-aware) client of one node; close it after use."""
        return redis.Redis(port=port, decode_responses=True, socket_timeout=10)

    def version(self) -> tuple[int, ...]:
        with self.node(self.ports[0]) as c:
            return tuple(int(p) for p in str(c.info("server")["redis_version"]).split("."))

    # --- life cycle --------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalCluster:
        try:
            for server in self.servers:
                server.launch()
            for server in self.servers:
                server.wait_ready(timeout)
            self._create(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, timeout: float) -> None:
        n = len(self.servers)
        for i, server in enumerate(self.servers):
            first, last = i * SLOTS // n, (i + 1) * SLOTS // n - 1
            with server.client() as c:
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                c.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        with self.servers[0].client() as c:
            for server in self.servers[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        self.wait_converged(timeout)

    def wait_converged(self, timeout: float = 30.0) -> None:
        """Until every node says ``cluster_state:ok`` and all agree on who owns each slot."""

        def converged() -> bool:
            views = []
            for server in self.servers:
                with server.client() as c:
                    if c.cluster("info")["cluster_state"] != "ok":
                        return False
                    views.append(self._slot_map(c))
            return all(v == views[0] for v in views) and len(views[0]) == SLOTS

        _wait(converged, timeout, "the cluster did not converge")

    @staticmethod
    def _slot_map(c: redis.Redis) -> dict[int, int]:
        owners: dict[int, int] = {}
        for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
            for slot in range(int(start), int(end) + 1):
                owners[slot] = int(primary[1])
        return owners

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- slots -------------------------------------------------------------------------------
    @staticmethod
    def key_slot(key: str) -> int:
        return key_slot(key.encode())

    def slot_owner(self, slot: int) -> int:
        """The port of the primary that owns ``slot`` (as the first node sees it)."""
        with self.node(self.ports[0]) as c:
            return self._slot_map(c)[slot]

    def _node_id(self, port: int) -> str:
        with self.node(port) as c:
            return str(c.execute_command("CLUSTER", "MYID"))

    def begin_migration(self, slot: int, target: int) -> int:
        """IMPORTING on ``target``, MIGRATING on the owner (the first step of a reshard);
        returns the owner's port. Commands for the slot now meet ASK / TRYAGAIN."""
        source = self.slot_owner(slot)
        if source == target:
            raise ValueError(f"slot {slot} is already on {target}")
        source_id, target_id = self._node_id(source), self._node_id(target)
        with self.node(target) as c:
            c.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        with self.node(source) as c:
            c.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        return source

    def migrate_keys(self, slot: int, source: int, target: int, count: int = 10) -> int:
        """MIGRATE up to ``count`` of the slot's keys from ``source`` to ``target``; how many."""
        with self.node(source) as c:
            keys = c.execute_command("CLUSTER", "GETKEYSINSLOT", slot, count)
            if keys:
                c.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
        return len(keys)

    def finish_migration(self, slot: int, target: int) -> None:
        """SETSLOT NODE on the target, the source and every other node (the last step)."""
        target_id = self._node_id(target)
        order = [target] + [p for p in self.ports if p != target]
        for port in order:
            with self.node(port) as c:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.wait_converged()

    def migrate_slot_rest(self, slot: int, source: int, target: int, batch: int = 10) -> int:
        """The rest of a migration begun with :meth:`begin_migration`: every key left, then
        SETSLOT NODE; how many keys were moved."""
        moved = 0
        while n := self.migrate_keys(slot, source, target, batch):
            moved += n
        self.finish_migration(slot, target)
        return moved

    def migrate_slot(self, slot: int, target: int, *, batch: int = 10, pause: float = 0.0) -> int:
        """Move ``slot`` to ``target`` the way ``redis-cli --cluster reshard`` does (IMPORTING,
        MIGRATING, MIGRATE in batches, SETSLOT NODE), sleeping ``pause`` between batches so
        traffic meets the slot half moved; returns the number of keys moved."""
        source = self.begin_migration(slot, target)
        moved = 0
        while n := self.migrate_keys(slot, source, target, batch):
            moved += n
            if pause:
                time.sleep(pause)
        self.finish_migration(slot, target)
        return moved


class LocalSentinel:
    """One master, one replica and ``sentinels`` Sentinel processes watching them."""

    def __init__(
        self,
        workdir: Path,
        *,
        sentinels: int = 2,
        master_name: str = "xgwmaster",
        executable: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.executable = executable or redis_executable()
        self.master_name = master_name
        ports = cluster_ports(2 + sentinels)
        replica_of = ["--replicaof", "127.0.0.1", str(ports[0])]
        self.data = [
            RedisServer(workdir / f"redis-{p}", port=p, executable=self.executable, extra=extra)
            for p, extra in ((ports[0], []), (ports[1], replica_of))
        ]
        self.watchers: list[RedisServer] = []
        for port in ports[2:]:
            directory = workdir / f"sentinel-{port}"
            directory.mkdir(parents=True, exist_ok=True)
            conf = directory / "sentinel.conf"  # Sentinel rewrites its file: one of its own
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"logfile {directory / 'sentinel.log'}\n"
                f"sentinel monitor {master_name} 127.0.0.1 {ports[0]} 1\n"
                f"sentinel down-after-milliseconds {master_name} 2000\n"
                f"sentinel failover-timeout {master_name} 10000\n"
            )
            self.watchers.append(
                RedisServer(directory, port=port, executable=self.executable, sentinel_config=conf)
            )

    @property
    def sentinels(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.watchers]

    @property
    def ports(self) -> list[int]:
        """The two data servers' ports (master first at start)."""
        return [s.port for s in self.data]

    def master_port(self) -> int:
        with self.watchers[0].client() as c:
            _host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            return int(port)

    def start(self, timeout: float = 30.0) -> LocalSentinel:
        try:
            for server in self.data:
                server.launch()
            for server in self.data:
                server.wait_ready(timeout)
            _wait(lambda: self._replica_in_sync(self.data[0].port), timeout, "no replica sync")
            for server in self.watchers:
                server.launch()
            for server in self.watchers:
                server.wait_ready(timeout)
            _wait(self._sentinels_see_replica, timeout, "the sentinels did not find the replica")
        except BaseException:
            self.stop()
            raise
        return self

    def _replica_in_sync(self, master: int) -> bool:
        replica = next(s for s in self.data if s.port != master)
        with replica.client() as c:
            info = c.info("replication")
            return info.get("master_link_status") == "up" and int(info["master_port"]) == master

    def _sentinels_see_replica(self) -> bool:
        """Every sentinel knows the replica well enough to promote it: connected, its own INFO
        read (Sentinel's sentinelSelectSlave skips a replica that is disconnected or whose INFO
        is stale, answering NOGOODSLAVE)."""
        for server in self.watchers:
            with server.client() as c:
                replicas = c.execute_command("SENTINEL", "REPLICAS", self.master_name)
                if not replicas:
                    return False
                for raw in replicas:
                    info = (
                        dict(zip(raw[::2], raw[1::2], strict=True))
                        if isinstance(raw, list)
                        else raw
                    )
                    if info.get("flags") != "slave" or info.get("master-link-status") != "ok":
                        return False
        return True

    def failover(self, timeout: float = 30.0, *, until_old_follows: bool = False) -> int:
        """SENTINEL FAILOVER: the replica becomes master; returns its port once every sentinel
        names it and it accepts writes (about a second). The old master stays a master until
        Sentinel turns it into a replica of the new one, about 10 s later (its INFO period):
        ``until_old_follows`` waits for that too (another 5 s or so: the full resync)."""
        old = self.master_port()
        with self.watchers[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", self.master_name)

        def switched() -> int | None:
            ports = set()
            for server in self.watchers:
                with server.client() as c:
                    _h, port = c.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
                    )
                    ports.add(int(port))
            if len(ports) != 1 or old in ports:
                return None
            new = ports.pop()
            with redis.Redis(port=new, decode_responses=True) as c:
                if c.info("replication")["role"] != "master":
                    return None
            return new

        new: int = _wait(switched, timeout, "the failover did not complete")
        if until_old_follows:
            _wait(lambda: self._replica_in_sync(new), timeout, "the old master did not follow")
        return new

    def stop(self) -> None:
        for server in [*self.watchers, *self.data]:
            server.stop()

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
