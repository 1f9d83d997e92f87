"""spillguard: an OpenAI- and Anthropic-compatible proxy that stops tool calls written out as text.

Module map, one paragraph per layer, callers first. Each layer imports only the layers below it.

Process. `cli.py` parses flags into the one immutable `Settings` (`settings.py`; `config.py`
reads the TOML config file under the flags and the environment) and starts `runner.py`, which
runs uvicorn on the application (one process, or workers that each build it through
`asgi:app_from_env`); `demo.py` runs the same application in the background in front of
`scripted.py` and `scripted_anthropic.py`, scripted upstreams that the tests use too.

Application. `asgi.py` wires one `context.Context` (settings, the upstreams, the observer) and
the layers a request passes: `mounts.Prefixes` (a named upstream's `/NAME/v1` served as `/v1`),
`limits.Limits` (header size, proxy keys, concurrency; its refusals observed), then `lean.Lean`,
which serves the inspected routes (one per wire in `asgi.WIRES`) straight from ASGI and leaves
everything else to FastAPI (the service routes, and every other /v1 path relayed untouched).
`context.py` also decides a request's dialect (a request with `anthropic-version`, or under
/v1/messages, goes to the Anthropic upstream and gets errors in that shape) and its policy
(`policy.py`: mode, hold limit, corrections; `rules.py`: the first `[[rules]]` entry matching its
upstream and model, then its `x-spillguard-mode`); `Context.incoming` reads all a request's
scope says in one pass. `handlers.py` holds the handlers of that context (the /v1 routes as ASGI
apps): read the body (`downstream.py`: the body under its deadline, and watching for the client
to leave), parse it (`jsonread.py`; a long one leaving its conversation and tools as bytes
until something reads them), decide whether it can be inspected, hand it to the wire's
`proxy.Decision`, and turn what comes back into a response (`answer.py` for a whole one,
`eventstream.py` for a stream).

Decision. `proxy.py` sends the request upstream (`exchange.py`: one request's exchanges and the
headers its response carries), asks the wire for a finding, and passes, repairs, retries once or
fails. A repair (`repair.py`, the one rule for every wire) answers a readable leak with the
calls its markup spells out; the retry's instruction comes from `correction.py` (by
`tool_choice`) and never carries the leaked markup. For a stream, `relay.py` drives the wire's
`Stream` editor event by event for one attempt, and `start.py` (a pure state machine) says when
the response may start or send a keep-alive. `chains.py` and `idmap.py` keep, for a spliced
Responses stream, which upstream response holds what the client received, so that a later
`previous_response_id` or GET names it; `usage.py` reads the tokens a leaked attempt cost. Every
decision is recorded on the request's `outcome.Outcome`, through its methods only.

Wires. `wire.py` defines what a wire supplies: the `Wire` record and the `Stream` protocol. Each
wire is sans-IO (SSE events from `sse.py` in, publishable bytes out), with the detection core
judging the text and `rawjson.py` splicing a retry's messages or a repair's calls into the
upstream's own bytes: Chat Completions (`chat.py`, its stream editor `chat_stream.py`, which
reads most content deltas and argument chunks by their bytes through `chat_shape.py` and edits
each choice through `chat_choices.py`, its structured calls `chat_calls.py`, its repair
`chat_repair.py`),
Responses (`responses.py`, `responses_stream.py`, `responses_events.py`, `responses_repair.py`,
and `responses_splice.py` for a retry spliced into a started stream), and Anthropic Messages
(`messages.py`, `messages_stream.py`, `messages_events.py`, `messages_repair.py`). `repeat.py`
drops from a spliced retry the prose the client already has. A fourth wire is a module that
builds a `Wire` and one more entry in `asgi.WIRES`.

Detection. `detect/` is the sans-IO core (it has its own design note): a `TurnScanner` per
assistant turn says whether its text is a tool call written out, and where it starts (a whole
text is first asked `detect.may_find`, which rules a finding out at C speed for text without
any marker's needle); `detect.read_calls` reads a leak's markup into calls for a repair;
`detect.anomalies` names the structured calls that are missing or malformed.

Edges. `upstream.py` and `reply.py` are the only aiohttp code: one pooled session per upstream,
header hygiene, and every wait reported to an `on_wait` hook (the outcome's upstream time);
`reply.py` reads a response (`Reply`) under its exchange's one total deadline (`Deadline`: one
timer for the headers and the body, which is also a stream's keep-alive bound). `observe.py`
receives each outcome once and logs it (`logs.py`, which writes the line straight to its own
stream handler when nothing else could see the record), counts it (`metrics.py`; in one
process the per-request counts are `tally.py`'s plain floats, exposed at scrape), traces it
when asked (`tracing.py`, OpenTelemetry, optional) and writes its findings (`incidents.py`: a
queue and a writer thread over an `incident_store.Store`, SQLite in `incident_sqlite.py` or
PostgreSQL in `incident_postgres.py`, kept within `retention.py`'s limits; `incident_query.py`
reads either for `spillguard incidents`; `spans.py` parses `30d`). `redact.py` keeps keys out
of all of them.

Errors. The small exception set is drawn in `errors.py`: every error spillguard raises is a
`SpillguardError` with an HTTP status and code in the OpenAI shape (the Messages wire writes it
in Anthropic's); foreign exceptions are mapped to it at `upstream.py`, `reply.py` and `proxy.py`.
"""
