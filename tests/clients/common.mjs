// Shared by the client scripts. Each script is run by tests/test_clients_node.py as
//   node tests/clients/<client>.mjs '<spec>'
// where <spec> is JSON: {"cases": [{"model", "call", "base", "retries", "timeoutMs", "chain"}]}.
// `model` names the case on the scripted upstream, `call` picks the client API to drive, `base`
// is spillguard's base URL, `retries` is the client's retry count (null: the client's default),
// `timeoutMs` its timeout (null: its default) and `chain` asks for a second turn after a tool
// call. The script runs the cases one after another and prints one JSON array: what the client
// library returned for each case (see tests/clients/scenarios.py, Outcome).

export const PROMPT = "What is the weather in Lisbon?";
export const TOOL_OUTPUT = '{"temperature_c": 21}';
export const TOOL = {
  name: "get_weather",
  description: "Current weather for a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  },
};

export function outcome() {
  return {
    text: "",
    calls: [],
    rejected: [],
    finish: null,
    responseId: null,
    messages: null,
    error: null,
    chained: null,
  };
}

// Where each client keeps the error code spillguard sends, tried in order; the first path that
// holds a string wins and is reported as `where`.
const CODE_PATHS = [
  ["code", (e) => e.code],
  ["error.code", (e) => e.error?.code],
  ["data.error.code", (e) => e.data?.error?.code],
  ["responseBody", (e) => parseBody(e.responseBody)?.error?.code],
  ["lastError.data.error.code", (e) => e.lastError?.data?.error?.code],
  ["cause.code", (e) => e.cause?.code],
  ["lc_error_code", (e) => e.lc_error_code],
];

function parseBody(text) {
  if (typeof text !== "string") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function failure(e) {
  const found = CODE_PATHS.find(([, get]) => typeof safe(get, e) === "string");
  const status = e?.status ?? e?.statusCode ?? e?.lastError?.statusCode ?? null;
  return {
    kind: e?.constructor?.name ?? typeof e,
    status: typeof status === "number" ? status : null,
    code: found ? safe(found[1], e) : null,
    where: found ? found[0] : null,
    message: String(e?.message ?? JSON.stringify(e)),
  };
}

function safe(get, e) {
  try {
    return e == null ? undefined : get(e);
  } catch {
    return undefined;
  }
}

export async function main(runners) {
  const spec = JSON.parse(process.argv[2]);
  const results = [];
  for (const c of spec.cases) {
    const run = runners[c.call];
    if (run === undefined) throw new Error(`unknown call ${c.call}`);
    results.push({ model: c.model, ...(await run(c)) });
  }
  process.stdout.write(JSON.stringify(results));
}
