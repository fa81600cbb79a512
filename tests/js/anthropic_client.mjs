// The official @anthropic-ai/sdk npm client against tokenflow's Messages API (issue 50):
// messages.create, the stream helper (text events, finalMessage equal to the whole answer),
// a tool loop (a forced tool_use block, its tool_result sent back), countTokens agreeing with
// create's usage, and an error surfacing as the SDK's typed error. Env: TF_BASE_URL
// (http://127.0.0.1:PORT), TF_MODEL (a model whose template renders tool turns).
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.TF_BASE_URL, apiKey: "sk-unused", maxRetries: 0 });
const model = process.env.TF_MODEL;

const messages = [{ role: "user", content: "Tell me a story" }];
const whole = await client.messages.create({ model, max_tokens: 16, temperature: 0, system: "Be brief", messages });
assert.equal(whole.type, "message");
assert.equal(whole.role, "assistant");
assert.match(whole.id, /^msg_/);
assert.equal(whole.content[0].type, "text");
assert.ok(whole.content[0].text.length > 0);
assert.equal(whole.stop_reason, "max_tokens");
assert.equal(whole.usage.output_tokens, 16);

// The stream helper: text events add up to the whole answer.
let text = "";
const stream = client.messages.stream({ model, max_tokens: 16, temperature: 0, system: "Be brief", messages });
stream.on("text", (t) => {
  text += t;
});
const final = await stream.finalMessage();
assert.equal(text, whole.content[0].text);
assert.deepEqual(final.content, whole.content);
assert.equal(final.stop_reason, "max_tokens");
assert.equal(final.usage.output_tokens, 16);

// countTokens says what create's usage says.
const counted = await client.messages.countTokens({ model, system: "Be brief", messages });
assert.equal(counted.input_tokens, whole.usage.input_tokens);

// A tool loop: a forced call, then its result as the next user turn.
const tools = [{
  name: "get_weather",
  description: "Weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] },
}];
const question = [{ role: "user", content: "Weather in Paris?" }];
const asked = await client.messages.create({
  model, max_tokens: 64, temperature: 0, tools, messages: question,
  tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
});
assert.equal(asked.stop_reason, "tool_use");
const use = asked.content.find((b) => b.type === "tool_use");
assert.equal(use.name, "get_weather");
assert.match(use.id, /^toolu_/);
assert.equal(typeof use.input.city, "string");
const answered = await client.messages.create({
  model, max_tokens: 8, temperature: 0, tools,
  messages: [...question, { role: "assistant", content: asked.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 C" }] }],
});
assert.equal(answered.type, "message");
assert.ok(answered.usage.input_tokens > asked.usage.input_tokens);

// The same forced call through the stream helper: the tool_use block with its parsed input.
const toolStream = client.messages.stream({
  model, max_tokens: 64, temperature: 0, tools, messages: question,
  tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
});
const toolFinal = await toolStream.finalMessage();
const streamedUse = toolFinal.content.find((b) => b.type === "tool_use");
assert.deepEqual(streamedUse.input, use.input);

// Errors are the SDK's typed errors with the server's message.
await assert.rejects(client.messages.create({ model: "nope", max_tokens: 4, messages }), (e) => {
  assert.ok(e instanceof Anthropic.NotFoundError, String(e));
  assert.match(e.message, /nope/);
  return true;
});
await assert.rejects(client.messages.create({ model, max_tokens: 4, temperature: -1, messages }), (e) => {
  assert.ok(e instanceof Anthropic.BadRequestError, String(e));
  assert.match(e.message, /temperature/);
  return true;
});

console.log("all anthropic client checks passed");
