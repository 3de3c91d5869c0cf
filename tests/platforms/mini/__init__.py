"""Mini: a made-up chat platform that lives only in the tests, the proof that a platform is one
folder (issue 39). Its adapter (``adapter/``) is written against the adapter kit alone
(``gateway.edge`` and the public core types); its entry point is the distribution in
``entry_point/``, which a test puts on ``sys.path`` (``tests.platforms.mini.harness``), so
nothing outside this folder names it; its platform is ``fake.py``.

The protocol (made up, shaped like the real ones):

- In: ``POST /api/mini/webhook/{integrationId}``, a JSON event signed as
  ``X-Mini-Signature: v1=hex(HMAC-SHA256(signingSecret, "{X-Mini-Timestamp}.{body}"))``, the
  timestamp in seconds and held to a window. Events: ``message`` (text from a user) and
  ``click`` (a button of one of the bot's messages, carrying the button's ``value``).
- Out: ``POST /v1/messages`` (a new message: text or a card, with an idempotency ``key``) and
  ``PUT /v1/messages/{id}`` (a card replaced in place), ``Authorization: Bearer {botToken}``;
  at most 20 calls a second to each API and 5 new messages a second per chat, past which the answer
  is 429 with ``Retry-After`` (the fake keeps them when built ``limited``). Mini shows no
  pictures and takes no files: an answer's picture is a plain link.
"""
