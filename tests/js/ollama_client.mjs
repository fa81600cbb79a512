// The official ollama npm client against tokenflow's Ollama door (issue 50): version, list, ps,
// show, chat whole and streamed (the same text), generate, embed, and a tool call (a schema in
// `format` makes the tiny model write the call; the server parses calls as JSON objects) with
// its result sent back as a tool message. Env: TF_HOST (http://127.0.0.1:PORT), TF_MODEL.
import assert from "node:assert/strict";
import { Ollama } from "ollama";

const ollama = new Ollama({ host: process.env.TF_HOST });
const model = process.env.TF_MODEL;

const version = await ollama.version();
assert.match(version.version, /^\d+\.\d+\.\d+$/);

const list = await ollama.list();
assert.deepEqual(list.models.map((m) => m.name), [`${model}:latest`]);
assert.equal(list.models[0].details.family, "llama");
assert.ok(list.models[0].modified_at instanceof Date || typeof list.models[0].modified_at === "string");
const ps = await ollama.ps();
assert.equal(ps.models.length, 1);
const show = await ollama.show({ model: `${model}:latest` });
assert.ok(show.template.length > 0);
assert.ok(show.capabilities.includes("completion"));

// Chat, whole and streamed: the same greedy answer.
const messages = [{ role: "user", content: "Tell me a story" }];
const options = { temperature: 0, num_predict: 16 };
const whole = await ollama.chat({ model, messages, options });
assert.equal(whole.done, true);
assert.equal(whole.message.role, "assistant");
assert.ok(whole.message.content.length > 0);
assert.equal(whole.eval_count, 16);
assert.equal(whole.done_reason, "length");
let streamed = "";
let last;
for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
  streamed += part.message.content;
  last = part;
}
assert.equal(streamed, whole.message.content);
assert.equal(last.done, true);
assert.equal(last.eval_count, 16);

// Generate: a raw prompt and its context.
const gen = await ollama.generate({ model, prompt: "Once upon a time", raw: true, options });
assert.equal(gen.done, true);
assert.ok(gen.response.length > 0);
assert.equal(gen.context.length, gen.prompt_eval_count + gen.eval_count);
let genStreamed = "";
for await (const part of await ollama.generate({ model, prompt: "Once upon a time", raw: true, options, stream: true })) {
  genStreamed += part.response;
}
assert.equal(genStreamed, gen.response);

// Embed: unit-length vectors, one per input.
const emb = await ollama.embed({ model, input: ["hello", "a cat"] });
assert.equal(emb.embeddings.length, 2);
for (const v of emb.embeddings) {
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
}

// A tool call and its result.
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather of a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 } },
      required: ["city"],
      additionalProperties: false,
    },
  },
};
const call = {
  type: "object",
  properties: { name: { const: "get_weather" }, arguments: weather.function.parameters },
  required: ["name", "arguments"],
  additionalProperties: false,
};
const question = [{ role: "user", content: "Weather in Paris?" }];
const asked = await ollama.chat({ model, messages: question, tools: [weather], format: call, options: { temperature: 0 } });
assert.equal(asked.message.tool_calls.length, 1);
const fn = asked.message.tool_calls[0].function;
assert.equal(fn.name, "get_weather");
assert.equal(typeof fn.arguments.city, "string");
const answer = await ollama.chat({
  model,
  tools: [weather],
  options: { temperature: 0, num_predict: 4 },
  messages: [...question, asked.message, { role: "tool", tool_name: "get_weather", content: "sunny, 21 C" }],
});
assert.equal(answer.done, true);
assert.ok(answer.prompt_eval_count > asked.prompt_eval_count);

// An unknown model is the client's ResponseError with the server's message and status.
await assert.rejects(ollama.chat({ model: "nope", messages: question }), (e) => {
  assert.equal(e.status_code, 404);
  assert.match(e.error, /nope/);
  return true;
});

console.log("all ollama client checks passed");
