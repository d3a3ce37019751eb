// Streams and completes through the unmodified OpenAI SDK for Node; exits non-zero on any
// mismatch. Usage: node openai_node_sdk.mjs BASE_URL API_KEY
import OpenAI, { toFile } from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const fail = (msg) => { console.error("sdk check failed:", msg); process.exit(1); };

const stream = await client.chat.completions.create({
  model: "chat-7b", stream: true, max_tokens: 12,
  messages: [{ role: "user", content: "Hello from the SDK" }],
});
let text = "", usage = null, replica = null, sawRole = false;
for await (const chunk of stream) {
  if (chunk.choices[0]?.delta?.role === "assistant") sawRole = true;
  text += chunk.choices[0]?.delta?.content ?? "";
  if (chunk.usage) { usage = chunk.usage; replica = chunk.replica_id; }
}
if (!sawRole) fail("no role delta");
if (!text) fail("no content");
if (!usage || usage.completion_tokens !== 12) fail("usage " + JSON.stringify(usage));
if (!replica) fail("no replica_id");

const full = await client.chat.completions.create({
  model: "chat-7b", max_completion_tokens: 4, messages: [{ role: "user", content: "Hi" }],
});
if (full.usage.completion_tokens !== 4 || !full.choices[0].message.content) fail("non-streaming");

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] });
  fail("unknown model accepted");
} catch (e) {
  if (!(e instanceof OpenAI.NotFoundError) || e.code !== "model_not_found") fail("404: " + e);
}
// Tools and the fields agent frameworks send pass through; usage can be left out of a stream.
const withTools = await client.chat.completions.create({
  model: "chat-7b", max_tokens: 3, tool_choice: "auto", parallel_tool_calls: true, user: null,
  response_format: { type: "text" },
  tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
  messages: [{ role: "user", content: "Weather?" },
             { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Oslo\"}" } }] },
             { role: "tool", tool_call_id: "c1", content: "21C" }],
});
if (withTools.usage.completion_tokens !== 3) fail("tools: " + JSON.stringify(withTools.usage));
const quiet = await client.chat.completions.create({
  model: "chat-7b", stream: true, max_tokens: 2, stream_options: { include_usage: false },
  messages: [{ role: "user", content: "Hi" }],
});
for await (const chunk of quiet) if (chunk.usage) fail("usage chunk despite include_usage false");
try {
  await client.chat.completions.create({ model: "chat-7b", response_format: { type: "json_object" }, messages: [{ role: "user", content: "x" }] });
  fail("json_object accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.param !== "response_format") fail("json_object: " + e);
}

// /v1/completions: text and token-id prompts, echo, streamed and not.
const cmpl = await client.completions.create({ model: "chat-7b", prompt: "The kiln", max_tokens: 5, echo: true });
if (cmpl.object !== "text_completion" || !cmpl.choices[0].text.startsWith("The kiln") || cmpl.usage.completion_tokens !== 5)
  fail("completions: " + JSON.stringify(cmpl));
const byIds = await client.completions.create({ model: "chat-7b", prompt: [5, 6, 7], max_tokens: 2 });
if (byIds.usage.prompt_tokens !== 3 || byIds.usage.completion_tokens !== 2) fail("token-id prompt: " + JSON.stringify(byIds.usage));
let streamed = "";
for await (const chunk of await client.completions.create({ model: "chat-7b", prompt: "Clay", max_tokens: 4, stream: true }))
  streamed += chunk.choices[0]?.text ?? "";
if (!streamed) fail("streamed completion");

// logprobs: chat (whole and streamed) and /v1/completions with echo, the way evaluation harnesses score a prompt.
const scored = await client.chat.completions.create({
  model: "chat-7b", max_tokens: 4, logprobs: true, top_logprobs: 3, messages: [{ role: "user", content: "Hi" }],
});
const lpContent = scored.choices[0].logprobs?.content ?? [];
if (lpContent.length !== scored.usage.completion_tokens || lpContent.map((t) => t.token).join("") !== scored.choices[0].message.content ||
    lpContent.some((t) => t.top_logprobs.length !== 3 || t.logprob > 0 || t.bytes.length === 0))
  fail("chat logprobs: " + JSON.stringify(scored.choices[0]));
let lpStreamed = 0;
for await (const chunk of await client.chat.completions.create({
  model: "chat-7b", max_tokens: 3, stream: true, logprobs: true, messages: [{ role: "user", content: "Hi" }] }))
  lpStreamed += chunk.choices[0]?.logprobs?.content?.length ?? 0;
if (lpStreamed !== 3) fail("streamed chat logprobs: " + lpStreamed);
const harness = await client.completions.create({ model: "chat-7b", prompt: "The kiln fires", max_tokens: 1, echo: true, logprobs: 1, temperature: 0 });
const hl = harness.choices[0].logprobs;
if (!hl || hl.tokens.length !== harness.usage.prompt_tokens + 1 || hl.token_logprobs[0] !== null ||
    hl.token_logprobs.slice(1).some((x) => typeof x !== "number") || hl.text_offset[0] !== 0 || hl.top_logprobs[0] !== null)
  fail("completions echo logprobs: " + JSON.stringify(harness.choices[0]));

// Sampling controls as the SDK types them, with vLLM's ignore_eos in the same body (as benchmark tools send it).
const steered = await client.chat.completions.create({
  model: "chat-7b", max_tokens: 40, presence_penalty: 0.5, frequency_penalty: -0.5, logit_bias: { "5": -100 }, ignore_eos: true,
  messages: [{ role: "user", content: "Hi" }],
});
if (steered.usage.completion_tokens !== 40 || steered.choices[0].finish_reason !== "length") fail("ignore_eos: " + JSON.stringify(steered));
try {
  await client.chat.completions.create({ model: "chat-7b", logit_bias: { "5": 101 }, messages: [{ role: "user", content: "x" }] });
  fail("logit_bias 101 accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.param !== "logit_bias") fail("logit_bias 101: " + e);
}

const models = await client.models.list();
if (!models.data.some((m) => m.id === "chat-7b")) fail("models list");
const one = await client.models.retrieve("chat-7b");
if (one.id !== "chat-7b" || one.object !== "model") fail("models retrieve: " + JSON.stringify(one));
try {
  await client.models.retrieve("no-such-model");
  fail("models retrieve of an unknown model");
} catch (e) {
  if (!(e instanceof OpenAI.NotFoundError)) fail("models retrieve unknown: " + e);
}

// Files and batches, as the SDK's batch guide does them.
const lines = [0, 1, 2].map((i) => JSON.stringify({ custom_id: "sdk-" + i, method: "POST", url: "/v1/chat/completions",
  body: { model: "chat-7b", max_tokens: 5, messages: [{ role: "user", content: "batch " + i }] } })).join("\n") + "\n";
const file = await client.files.create({ file: await toFile(Buffer.from(lines), "sdk.jsonl"), purpose: "batch" });
if (file.purpose !== "batch" || file.bytes !== Buffer.byteLength(lines)) fail("file " + JSON.stringify(file));
let batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h",
  metadata: { from: "sdk" } });
for (let i = 0; i < 300 && !["completed", "failed", "expired", "cancelled"].includes(batch.status); ++i) {
  await new Promise((r) => setTimeout(r, 100));
  batch = await client.batches.retrieve(batch.id);
}
if (batch.status !== "completed" || batch.request_counts.completed !== 3 || batch.metadata.from !== "sdk") fail("batch " + JSON.stringify(batch));
const output = await (await client.files.content(batch.output_file_id)).text();
const answers = output.trim().split("\n").map((l) => JSON.parse(l));
if (answers.length !== 3 || new Set(answers.map((a) => a.custom_id)).size !== 3 ||
    answers.some((a) => a.response.status_code !== 200 || a.response.body.usage.completion_tokens !== 5))
  fail("batch output " + output);
const listed = [];
for await (const b of client.batches.list({ limit: 10 })) listed.push(b.id);
if (!listed.includes(batch.id)) fail("batches list");
try {
  await client.batches.cancel(batch.id);
  fail("a completed batch was cancelled");
} catch (e) {
  if (!(e instanceof OpenAI.ConflictError)) fail("cancel: " + e);
}
console.log("openai node sdk: stream, completion, 404, tools, include_usage, logprobs, completions, models, files and batches all as expected");
