// LangChain JS (@langchain/openai ChatOpenAI) against spillguard: invoke and stream, on Chat
// Completions and on the Responses API. See common.mjs for the protocol with the test.
import { ToolMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { PROMPT, TOOL, TOOL_OUTPUT, failure, main, outcome } from "./common.mjs";

function chatModel(c, api) {
  const fields = {
    model: c.model,
    apiKey: "sk-test",
    configuration: { baseURL: c.base },
    useResponsesApi: api === "responses",
  };
  if (c.retries !== null) fields.maxRetries = c.retries;
  if (c.timeoutMs !== null) fields.timeout = c.timeoutMs;
  return new ChatOpenAI(fields).bindTools([{ type: "function", function: TOOL }]);
}

function message(o, msg, api) {
  o.text = msg.text;
  o.calls = (msg.tool_calls ?? []).map((tc) => ({
    id: tc.id,
    name: tc.name,
    arguments: JSON.stringify(tc.args),
  }));
  o.rejected = (msg.invalid_tool_calls ?? []).map((tc) => `${tc.name}: ${tc.error ?? tc.args}`);
  const meta = msg.response_metadata ?? {};
  o.finish = meta.finish_reason ?? meta.status ?? null;
  o.responseId = meta.id ?? msg.id ?? null;
  if (api === "responses" && Array.isArray(msg.content)) {
    o.messages = msg.content.filter((b) => b.type === "text").map((b) => b.text);
  }
}

// The next turn after a tool call, chained with previous_response_id as LangChain documents it.
async function chain(c, api, o) {
  if (!c.chain || o.error !== null || o.calls.length === 0) return;
  const next = outcome();
  try {
    const reply = await chatModel({ ...c, retries: 0 }, api).invoke(
      [new ToolMessage({ tool_call_id: o.calls[0].id, content: TOOL_OUTPUT })],
      { previous_response_id: o.responseId },
    );
    message(next, reply, api);
  } catch (e) {
    next.error = failure(e);
  }
  o.chained = next;
}

async function invoke(c, api) {
  const o = outcome();
  try {
    message(o, await chatModel(c, api).invoke(PROMPT), api);
  } catch (e) {
    o.error = failure(e);
  }
  await chain(c, api, o);
  return o;
}

async function stream(c, api) {
  const o = outcome();
  let whole = null;
  try {
    for await (const chunk of await chatModel(c, api).stream(PROMPT)) {
      o.text += chunk.text;
      whole = whole === null ? chunk : whole.concat(chunk);
    }
    const live = o.text;
    if (whole !== null) message(o, whole, api);
    o.text = live;
  } catch (e) {
    o.error = failure(e);
  }
  await chain(c, api, o);
  return o;
}

await main({
  "chat.invoke": (c) => invoke(c, "chat"),
  "chat.stream": (c) => stream(c, "chat"),
  "responses.invoke": (c) => invoke(c, "responses"),
  "responses.stream": (c) => stream(c, "responses"),
});
