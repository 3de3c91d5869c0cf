"""The edge: what an adapter may import, one job per module -
``adapter`` (the Adapter base and the live view of adapters), ``outbound`` (what it answers
with), ``factory`` (one factory per platform, found by entry point), ``context`` (what the core
lends it), ``ingest`` (intake and its errors), ``stores`` (records and timelines), ``approvers``
(who may answer a button), ``platform_api`` (the API client base; how its failures are logged),
``call_budget`` (the app's platform budget each call waits on), ``calls`` (how a call is
asked for: its priority, chat and update slot), ``leases`` (one owner for a long connection),
``downloads`` (checked downloads), ``media`` (the answer's images and files, fetched
from allowed origins), ``chat_actions`` (what an adapter can do in a chat for an agent:
the MCP tools each platform declares), ``parts`` (a long answer in numbered parts that fit a
platform's limits), ``inbound``
(the one shape of a way in, webhook or long connection), ``webhook`` (the skeleton of an HTTP
intake), ``body`` (bounded reading and parsing), ``server_log``
(aiohttp's own refusals)."""
