"""Intake: what an adapter hands in (Envelopes) goes through the chain of handlers into a stored
burst, or into the spool when Redis is away.

``pipeline`` is the entry point (the runtime builds its chain, in one order:
``gateway/runtime/intake.py``); ``router`` the chain itself; ``drops`` the rules that come
first; ``commands`` what a chat command is, ``chat_commands`` what each does; ``buttons`` card
clicks; ``controls`` Stop and New; ``burst`` storing into the burst (and chat messages);
``triggered`` schedule fires and external events; ``refusals`` the answer to a message over a
budget; ``replies`` what intake says in the chat itself; ``spool`` / ``spooler`` the spool."""
