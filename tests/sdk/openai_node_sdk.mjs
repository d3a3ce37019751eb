// Streams and completes through the unmodified OpenAI SDK for Node; exits non-zero on any
// mismatch. Usage: node openai_node_sdk.mjs BASE_URL API_KEY
import OpenAI from "openai";

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
const models = await client.models.list();
if (!models.data.some((m) => m.id === "chat-7b")) fail("models list");
console.log("openai node sdk: stream, completion, 404 and models all as expected");
