"""``--redis cluster`` for the chaos run: the 3-primary Redis Cluster of
``tests/support/cluster.py`` (LocalCluster), started under the run's work directory."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from bench.chaos_redis import Stats, audit_rows_of, memory_by_kind, pause_processes
from tests.support.cluster import LocalCluster


class ClusterRedis:
    mode = "cluster"

    def __init__(self, workdir: Path) -> None:
        self.cluster = LocalCluster(workdir / "cluster")

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.cluster.ports]

    async def start(self) -> None:
        await asyncio.to_thread(self.cluster.start)

    async def stop(self) -> None:
        for server in self.cluster.servers:  # a stopped node ignores SIGTERM
            if server.proc is not None and server.proc.poll() is None:
                server.proc.send_signal(signal.SIGCONT)
        await asyncio.to_thread(self.cluster.stop)

    async def pause(self, seconds: float, how: str) -> None:
        procs = [s.proc for s in self.cluster.servers if s.proc is not None]
        await pause_processes(procs, self.nodes, seconds, how)

    def stats(self) -> Stats:
        return Stats(self.nodes)

    async def audit_rows(self, prefix: str) -> list[dict[str, str]]:
        client = RedisCluster.from_url(self.url, decode_responses=True)
        try:
            return await audit_rows_of(client, prefix)
        finally:
            await client.aclose()

    async def memory(self, prefix: str) -> dict[str, dict[str, int]]:
        total: dict[str, dict[str, int]] = {}
        for _host, port in self.nodes:
            client = aioredis.Redis(port=port)
            try:
                for kind, entry in (await memory_by_kind(client, prefix)).items():
                    into = total.setdefault(kind, {"keys": 0, "bytes": 0})
                    into["keys"] += entry["keys"]
                    into["bytes"] += entry["bytes"]
            finally:
                await client.aclose()
        return total
