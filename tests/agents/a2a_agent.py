"""The agent the suite serves with a2a-sdk (tests/support/agent_servers.py): the SDK's own
request handler, task store, JSON-RPC and HTTP+JSON routes and agent card route (A2A protocol
1.0), with a small executor of ours. What it does is read from markers in the message:

- ``[ask]``: a status "Looking it up", then ``input-required`` asking "Which account?"; the
  next message of the same task is the answer: the task completes with the text artifact
  ``Account <answer> is active.``
- ``[file]``: completes with a text artifact and a file artifact (``report.csv``, raw bytes).
- ``[slow]``: a status, then 200 artifact chunks 50 ms apart (for Stop).
- ``[auth]``: ``auth-required``.  ``[fail]``: ``failed`` with a message.  ``[boom]``: raises.
- ``[message]``: answers with a single agent message, no task.
- anything else: a status "Thinking", then the text artifact ``Echo: <text>`` in two chunks.

    python tests/agents/a2a_agent.py --port 9999
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Role,
    TaskState,
)
from starlette.applications import Starlette

ASKED = "Which account?"


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        if "[message]" in text:
            reply = new_text_message(f"Plain reply: {text}", role=Role.ROLE_AGENT)
            reply.context_id = str(context.context_id)
            await event_queue.enqueue_event(reply)
            return
        if task is None and context.message is not None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        if context.current_task is not None and (
            context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        ):
            await updater.add_artifact([Part(text=f"Account {text} is active.")], name="answer")
            await updater.complete()
            return
        await updater.start_work(self._say("Thinking" if "[ask]" not in text else "Looking it up"))
        if "[ask]" in text:
            await updater.requires_input(self._say(ASKED))
        elif "[auth]" in text:
            await updater.requires_auth(self._say("Sign in to the CRM first."))
        elif "[fail]" in text:
            await updater.failed(self._say("The CRM is down."))
        elif "[boom]" in text:
            raise RuntimeError("the executor broke")
        elif "[file]" in text:
            await updater.add_artifact([Part(text="Here is your report.")], name="answer")
            csv = Part(raw=b"id,total\n1,10\n", media_type="text/csv", filename="report.csv")
            await updater.add_artifact([csv], name="report")
            await updater.complete()
        elif "[slow]" in text:
            for i in range(200):
                await updater.add_artifact(
                    [Part(text=f"w{i} ")], artifact_id="slow", append=i > 0, last_chunk=i == 199
                )
                await asyncio.sleep(0.05)
            await updater.complete()
        else:
            await updater.add_artifact([Part(text="Echo: ")], artifact_id="a1", name="answer")
            await updater.add_artifact(
                [Part(text=text)], artifact_id="a1", append=True, last_chunk=True
            )
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel()

    @staticmethod
    def _say(text: str) -> object:
        return new_text_message(text, role=Role.ROLE_AGENT)


def app(port: int) -> Starlette:
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="Helpdesk",
        description="The suite's A2A agent",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url + "/a2a", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url + "/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "image/png"],
        default_output_modes=["text/plain", "text/csv"],
        skills=[AgentSkill(id="help", name="Help", description="Answers", tags=["help"])],
    )
    handler = DefaultRequestHandlerV2(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/a2a"),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    return Starlette(routes=routes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning")
