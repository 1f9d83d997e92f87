// @anthropic-ai/sdk against spillguard's Messages route, run by tests/test_messages_node.py as
//   node tests/clients_anthropic/messages.mjs '<spec>'
// where <spec> is JSON: {"base": spillguard's base URL, "cases": [{"model", "call"}]}. `model`
// names the case on the scripted upstream; `call` is create, stream, count or models. The cases
// run one after another; the script prints one JSON array with what the SDK returned for each.
import Anthropic from "@anthropic-ai/sdk";

const TOOLS = [
  {
    name: "get_weather",
    description: "Current weather for a city",
    input_schema: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    },
  },
  {
    name: "Read",
    description: "Read a file",
    input_schema: { type: "object", properties: { file_path: { type: "string" } } },
  },
];
const MESSAGES = [{ role: "user", content: "What is the weather in Lisbon?" }];

function blocks(message) {
  return message.content.map((b) => {
    if (b.type === "text") return { type: b.type, text: b.text };
    if (b.type === "thinking") return { type: b.type, text: b.thinking, signature: b.signature };
    if (b.type === "tool_use") return { type: b.type, text: b.name, input: b.input };
    return { type: b.type };
  });
}

function failure(e) {
  return {
    kind: e?.constructor?.name ?? typeof e,
    status: e?.status ?? null,
    errorCode: e?.errorCode ?? null,
    type: e?.type ?? null,
    requestID: e?.requestID ?? null,
    message: String(e?.message ?? e),
  };
}

const CALLS = {
  async create(client, c) {
    const message = await client.messages.create({
      model: c.model,
      max_tokens: 1024,
      messages: MESSAGES,
      tools: TOOLS,
    });
    return { blocks: blocks(message), stop: message.stop_reason };
  },
  async stream(client, c, out) {
    const stream = client.messages.stream({
      model: c.model,
      max_tokens: 1024,
      messages: MESSAGES,
      tools: TOOLS,
    });
    out.text = "";
    stream.on("text", (delta) => {
      out.text += delta;
    });
    const message = await stream.finalMessage();
    return { blocks: blocks(message), stop: message.stop_reason };
  },
  async count(client, c) {
    const counted = await client.messages.countTokens({
      model: c.model,
      messages: MESSAGES,
      tools: TOOLS,
    });
    return { inputTokens: counted.input_tokens };
  },
  async models(client) {
    const page = await client.models.list();
    return { models: page.data.map((m) => m.id) };
  },
};

async function run(base, c) {
  const client = new Anthropic({ baseURL: base, apiKey: "sk-ant-test", maxRetries: c.retries });
  const out = { model: c.model, error: null };
  try {
    Object.assign(out, await CALLS[c.call](client, c, out));
  } catch (e) {
    out.error = failure(e);
  }
  return out;
}

const spec = JSON.parse(process.argv[2]);
const results = [];
for (const c of spec.cases) results.push(await run(spec.base, c));
process.stdout.write(JSON.stringify(results));
