"""spillguard: an OpenAI-compatible proxy that stops tool calls written out as text.

Module map, one paragraph per layer, callers first. Each layer imports only the layers below it.

Process. `cli.py` parses flags into the one immutable `Settings` (`settings.py`) and starts
`runner.py`, which runs uvicorn on the application (one process, or workers that each build it
through `asgi:app_from_env`); `demo.py` runs the same application in the background in front of
`scripted.py`, a scripted upstream that the tests use too.

Application. `asgi.py` wires one `handlers.Context` (settings, upstream, observer), the `Limits`
middleware (`limits.py`: header size, proxy keys, concurrency) and the routes: one per wire in
`asgi.WIRES`, and everything else under /v1 relayed untouched. `handlers.py` holds the handlers as
module-level functions of that context: read the body, decide whether it can be inspected, hand
it to the wire's `proxy.Decision`, and turn what comes back into a response.

Decision. `proxy.py` sends the request upstream, asks the wire for a finding, and passes, retries
once or fails. For a stream it drives the wire's `Stream` editor event by event and asks
`start.py` (a pure state machine) when the response may start. It records what it decided on the
request's `outcome.Outcome`, through its methods only.

Wires. `wire.py` defines what a wire supplies: the `Wire` record and the `Stream` protocol.
`chat.py` (Chat Completions) and `responses.py` (Responses) implement it, sans-IO: SSE events
from `sse.py` in, publishable bytes out, with the detection core judging the text and
`rawjson.py` splicing a retry's two messages into the client's own bytes.

Detection. `detect/` is the sans-IO core (it has its own design note): a `TurnScanner` per
assistant turn says whether its text is a tool call written out, and where it starts.

Edges. `upstream.py` is the only aiohttp code: one pooled session, header hygiene, and every
wait reported to an `on_wait` hook (the outcome's upstream time). `observe.py` receives each
outcome once and logs it (`logs.py`), counts it (`metrics.py`) and writes its findings
(`incidents.py`); `redact.py` keeps keys out of all three.

Errors. The small exception set is drawn in `errors.py`: every error spillguard raises is a
`SpillguardError` with an HTTP status and code in the OpenAI shape; foreign exceptions are
mapped to it at `upstream.py` and `proxy.py`.

A third wire: the Anthropic Messages API (`POST /v1/messages`, issue 13) is a module
`messages.py` that builds a `Wire` and one more entry in `asgi.WIRES`. It has to supply:

- `route` "messages" and `path` "messages";
- `inspect_reply(reply, tools, hold_limit)`: the first finding in a whole reply's `content`
  blocks (`text` blocks through a `TurnScanner`'s content side, `thinking` blocks through its
  reasoning side, a `tool_use` block as the structured call), with the turn's text;
- `new_stream(tools, hold_limit, previous)`: a `Stream` over its named events
  (`message_start`, `content_block_start/delta/stop`, `message_delta`, `message_stop`), with
  `ended` on `message_stop` and an empty `trailer`; after `previous` published, a splice that
  renumbers block `index` past the first attempt's blocks (or `can_splice` false);
- `error_event(error, stream)`: an `event: error` with `{"type": "error", "error": {...}}`;
- `retry_key` "messages" and `retry_body` (the same append as chat; its `messages` is always an
  array, so no `item_from_string`);
- and `detect.declared_tools` must read its tool shape (`{"name", "input_schema"}`), a change
  in the detection core.
"""
