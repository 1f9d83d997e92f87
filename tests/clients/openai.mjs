// openai-node against spillguard: Chat Completions and the Responses API, whole, streamed and
// through the stream helpers. See common.mjs for the protocol with the test.
import OpenAI from "openai";
import { PROMPT, TOOL, TOOL_OUTPUT, failure, main, outcome } from "./common.mjs";

const CHAT_TOOLS = [{ type: "function", function: TOOL }];
const RESPONSES_TOOLS = [{ type: "function", ...TOOL }];
const MESSAGES = [{ role: "user", content: PROMPT }];

function client(c) {
  const options = { baseURL: c.base, apiKey: "sk-test" };
  if (c.retries !== null) options.maxRetries = c.retries;
  if (c.timeoutMs !== null) options.timeout = c.timeoutMs;
  return new OpenAI(options);
}

async function guarded(o, body) {
  try {
    await body();
  } catch (e) {
    o.error = failure(e);
  }
  return o;
}

function chatMessage(o, completion) {
  const choice = completion.choices[0];
  o.text = choice.message.content ?? "";
  o.calls = (choice.message.tool_calls ?? []).map((tc) => ({
    id: tc.id,
    name: tc.function.name,
    arguments: tc.function.arguments,
  }));
  o.finish = choice.finish_reason;
  o.responseId = completion.id;
}

// A plain stream, assembled the way clients do: string fields of a tool call concatenate.
async function chatChunks(o, stream) {
  const calls = [];
  for await (const chunk of stream) {
    o.responseId = chunk.id;
    for (const choice of chunk.choices) {
      o.text += choice.delta.content ?? "";
      for (const tc of choice.delta.tool_calls ?? []) {
        const call = (calls[tc.index] ??= { id: "", name: "", arguments: "" });
        call.id += tc.id ?? "";
        call.name += tc.function?.name ?? "";
        call.arguments += tc.function?.arguments ?? "";
      }
      if (choice.finish_reason) o.finish = choice.finish_reason;
    }
  }
  o.calls = calls.filter(Boolean);
}

function responseOutput(o, response) {
  o.responseId = response.id;
  o.finish = response.status;
  o.messages = response.output
    .filter((item) => item.type === "message")
    .map((item) => item.content.map((part) => part.text ?? "").join(""));
  o.calls = response.output
    .filter((item) => item.type === "function_call")
    .map((item) => ({ id: item.call_id, name: item.name, arguments: item.arguments }));
}

async function responseEvents(o, stream) {
  let completed = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") o.text += event.delta;
    if (event.type === "response.completed") completed = event.response;
  }
  if (completed !== null) responseOutput(o, completed);
}

// The next turn after a tool call, chained by hand with previous_response_id.
async function chain(c, o) {
  if (!c.chain || o.error !== null || o.calls.length === 0) return;
  const next = outcome();
  o.chained = await guarded(next, async () => {
    const response = await client(c).responses.create({
      model: c.model,
      previous_response_id: o.responseId,
      input: [{ type: "function_call_output", call_id: o.calls[0].id, output: TOOL_OUTPUT }],
      tools: RESPONSES_TOOLS,
    });
    responseOutput(next, response);
    next.text = response.output_text;
  });
}

const chatArgs = (c) => ({ model: c.model, messages: MESSAGES, tools: CHAT_TOOLS });
const responsesArgs = (c) => ({ model: c.model, input: PROMPT, tools: RESPONSES_TOOLS });

await main({
  "chat.create": (c) => {
    const o = outcome();
    return guarded(o, async () => chatMessage(o, await client(c).chat.completions.create(chatArgs(c))));
  },
  "chat.create.stream": (c) => {
    const o = outcome();
    return guarded(o, async () =>
      chatChunks(o, await client(c).chat.completions.create({ ...chatArgs(c), stream: true })),
    );
  },
  "chat.stream": (c) => {
    const o = outcome();
    return guarded(o, async () => {
      const stream = client(c).chat.completions.stream(chatArgs(c));
      for await (const chunk of stream) o.text += chunk.choices[0]?.delta?.content ?? "";
      chatMessage(o, await stream.finalChatCompletion());
    });
  },
  "responses.create": async (c) => {
    const o = outcome();
    await guarded(o, async () => {
      const response = await client(c).responses.create(responsesArgs(c));
      responseOutput(o, response);
      o.text = response.output_text;
    });
    await chain(c, o);
    return o;
  },
  "responses.create.stream": async (c) => {
    const o = outcome();
    await guarded(o, async () =>
      responseEvents(o, await client(c).responses.create({ ...responsesArgs(c), stream: true })),
    );
    await chain(c, o);
    return o;
  },
  "responses.stream": async (c) => {
    const o = outcome();
    await guarded(o, async () => {
      const stream = client(c).responses.stream(responsesArgs(c));
      for await (const event of stream) {
        if (event.type === "response.output_text.delta") o.text += event.delta;
      }
      const final = await stream.finalResponse();
      responseOutput(o, final);
      o.text = final.output_text;
    });
    await chain(c, o);
    return o;
  },
});
