// The official `openai` npm client against a running tokenflow server (tests/serving).
// Env: TF_BASE_URL (http://127.0.0.1:PORT/v1), TF_MODEL. Exits non-zero on the first failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.TF_BASE_URL, apiKey: "unused", maxRetries: 0 });
const model = process.env.TF_MODEL;

// Models.
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model]);

// Completions, whole and streamed: the same greedy text.
const whole = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 24, temperature: 0,
});
assert.equal(whole.choices.length, 1);
assert.ok(whole.choices[0].text.length > 0);
assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
let streamed = "";
let finish = null;
let usage = null;
const stream = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(streamed, whole.choices[0].text);
assert.equal(finish, whole.choices[0].finish_reason);
assert.equal(usage.completion_tokens, whole.usage.completion_tokens);

// n > 1, logprobs, stop.
const many = await client.completions.create({
  model, prompt: "The cat", max_tokens: 8, n: 3, temperature: 1, seed: 5, logprobs: 2,
});
assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2]);
for (const c of many.choices) {
  assert.equal(c.logprobs.tokens.length, c.logprobs.token_logprobs.length);
  for (const top of c.logprobs.top_logprobs) assert.equal(Object.keys(top).length, 2);
}
const word = whole.choices[0].text.split(" ")[3];
const stopped = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, stop: [word],
});
assert.equal(stopped.choices[0].finish_reason, "stop");
assert.ok(!stopped.choices[0].text.includes(word));

// Chat, whole and streamed.
const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a dog" }];
const chat = await client.chat.completions.create({
  model, messages, max_completion_tokens: 20, temperature: 0, logprobs: true, top_logprobs: 1,
});
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.choices[0].logprobs.content.length, chat.usage.completion_tokens);
let role = null;
let content = "";
const chatStream = await client.chat.completions.create({
  model, messages, max_completion_tokens: 20, temperature: 0, stream: true,
});
for await (const chunk of chatStream) {
  const d = chunk.choices[0]?.delta ?? {};
  if (d.role && role === null) role = d.role;
  content += d.content ?? "";
}
assert.equal(role, "assistant");
assert.equal(content, chat.choices[0].message.content);

const chatMany = await client.chat.completions.create({
  model, messages, max_tokens: 6, n: 2, temperature: 0.9, seed: 1,
});
assert.equal(chatMany.choices.length, 2);

// Errors arrive as the client's typed errors.
await assert.rejects(
  client.completions.create({ model: "no-such-model", prompt: "x" }),
  (e) => e.status === 404 && e.error?.code === "model_not_found",
);
await assert.rejects(
  client.completions.create({ model, prompt: "x", temperature: -1 }),
  (e) => e.status === 400 && e.error?.param === "temperature",
);

console.log("all openai client checks passed");
