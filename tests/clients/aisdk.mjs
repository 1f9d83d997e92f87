// The Vercel AI SDK against spillguard: generateText and streamText on @ai-sdk/openai's chat
// model (`openai.chat`), its default Responses model (`openai(...)`), and
// @ai-sdk/openai-compatible's chat model. See common.mjs for the protocol with the test.
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, streamText, tool } from "ai";
import { PROMPT, TOOL, TOOL_OUTPUT, failure, main, outcome } from "./common.mjs";

const TOOLS = {
  [TOOL.name]: tool({ description: TOOL.description, inputSchema: jsonSchema(TOOL.parameters) }),
};

function model(c, flavour) {
  const settings = { baseURL: c.base, apiKey: "sk-test" };
  if (flavour === "chat") return createOpenAI(settings).chat(c.model);
  if (flavour === "responses") return createOpenAI(settings)(c.model);
  return createOpenAICompatible({ name: "spillguard", ...settings }).chatModel(c.model);
}

function settings(c, flavour) {
  const out = { model: model(c, flavour), tools: TOOLS, prompt: PROMPT };
  if (c.retries !== null) out.maxRetries = c.retries;
  return out;
}

const call = (part) => ({
  id: part.toolCallId,
  name: part.toolName,
  arguments: JSON.stringify(part.input),
});

async function generate(c, flavour) {
  const o = outcome();
  let result = null;
  try {
    result = await generateText(settings(c, flavour));
    o.text = result.text;
    o.calls = result.toolCalls.map(call);
    o.finish = result.finishReason;
    o.responseId = result.response.id;
    if (flavour === "responses") {
      o.messages = result.content.filter((p) => p.type === "text").map((p) => p.text);
    }
  } catch (e) {
    o.error = failure(e);
  }
  if (result !== null) await chain(c, flavour, o, result.response.messages);
  return o;
}

// streamText never throws: a failure arrives as an `error` part and finishReason "error".
async function stream(c, flavour) {
  const o = outcome();
  const result = streamText({ ...settings(c, flavour), onError: () => {} });
  const texts = new Map();
  for await (const part of result.fullStream) {
    if (part.type === "text-delta") {
      o.text += part.text;
      texts.set(part.id, (texts.get(part.id) ?? "") + part.text);
    } else if (part.type === "tool-call") {
      o.calls.push(call(part));
    } else if (part.type === "error") {
      o.error = failure(part.error);
    } else if (part.type === "finish") {
      o.finish = part.finishReason;
    }
  }
  if (flavour === "responses") o.messages = [...texts.values()];
  if (o.error === null) {
    const response = await result.response;
    o.responseId = response.id;
    await chain(c, flavour, o, response.messages);
  }
  return o;
}

// The next turn after a tool call: the conversation so far plus the tool result, as an AI SDK
// app sends it. With `chain: "previous"` the Responses model is also given previousResponseId.
async function chain(c, flavour, o, responseMessages) {
  if (!c.chain || o.error !== null || o.calls.length === 0) return;
  const next = outcome();
  const result = {
    type: "tool-result",
    toolCallId: o.calls[0].id,
    toolName: o.calls[0].name,
    output: { type: "text", value: TOOL_OUTPUT },
  };
  const args = { ...settings(c, flavour), maxRetries: 0 };
  delete args.prompt;
  args.messages = [
    { role: "user", content: PROMPT },
    ...responseMessages,
    { role: "tool", content: [result] },
  ];
  if (c.chain === "previous") args.providerOptions = { openai: { previousResponseId: o.responseId } };
  try {
    const answer = await generateText(args);
    next.text = answer.text;
    next.calls = answer.toolCalls.map(call);
    next.finish = answer.finishReason;
    next.responseId = answer.response.id;
  } catch (e) {
    next.error = failure(e);
  }
  o.chained = next;
}

const runners = {};
for (const flavour of ["chat", "responses", "compat"]) {
  runners[`${flavour}.generate`] = (c) => generate(c, flavour);
  runners[`${flavour}.stream`] = (c) => stream(c, flavour);
}
await main(runners);
