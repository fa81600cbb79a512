// The official openai npm client against tokenflow's Responses API and embeddings (issue 26):
// responses.create with instructions, the stream helper (events in order, finalResponse equal
// to the deltas), a tool loop in Responses items (function_call, then function_call_output),
// responses.parse with zodTextFormat, and embeddings.create (the client asks for base64 and
// decodes it) equal to the float encoding. Env: TF_BASE_URL, TF_MODEL (a model whose template
// renders tools and tool results, e.g. Qwen2.5's).
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";

const client = new OpenAI({ baseURL: process.env.TF_BASE_URL, apiKey: "unused" });
const model = process.env.TF_MODEL;

// 1. A plain response: one message item whose text is output_text.
const plain = await client.responses.create({
  model, instructions: "Answer briefly.", input: "Say hello", max_output_tokens: 12, temperature: 0,
});
assert.equal(plain.object, "response");
assert.match(plain.id, /^resp_/);
assert.ok(["completed", "incomplete"].includes(plain.status));
assert.equal(plain.instructions, "Answer briefly.");
assert.equal(plain.output.length, 1);
assert.equal(plain.output[0].type, "message");
assert.equal(plain.output[0].role, "assistant");
assert.equal(plain.output_text, plain.output[0].content[0].text);
assert.ok(plain.output_text.length > 0);
assert.ok(plain.usage.input_tokens > 0);
assert.ok(plain.usage.output_tokens > 0 && plain.usage.output_tokens <= 12);
assert.equal(plain.usage.total_tokens, plain.usage.input_tokens + plain.usage.output_tokens);

// 2. Streamed, greedy: the same text, events numbered in order, the deltas adding up.
const stream = client.responses.stream({
  model, instructions: "Answer briefly.", input: "Say hello", max_output_tokens: 12, temperature: 0,
});
let deltas = "";
let seq = -1;
const types = [];
for await (const event of stream) {
  assert.equal(event.sequence_number, seq + 1);
  seq = event.sequence_number;
  types.push(event.type);
  if (event.type === "response.output_text.delta") deltas += event.delta;
}
const streamed = await stream.finalResponse();
assert.equal(types[0], "response.created");
assert.equal(types[1], "response.in_progress");
assert.ok(types.includes("response.output_item.added"));
assert.ok(types.includes("response.output_text.done"));
assert.ok(["response.completed", "response.incomplete"].includes(types.at(-1)));
assert.equal(deltas, plain.output_text);
// (the stream helper's final response has no output_text convenience: the items hold the text)
const streamedText = streamed.output.filter((o) => o.type === "message")
  .flatMap((o) => o.content).map((c) => c.text).join("");
assert.equal(streamedText, plain.output_text);

// 3. A tool loop in Responses items.
const tools = [{
  type: "function", name: "add", description: "Adds two integers", strict: true,
  parameters: {
    type: "object",
    properties: { a: { type: "integer", minimum: -99, maximum: 99 }, b: { type: "integer", minimum: -99, maximum: 99 } },
    required: ["a", "b"], additionalProperties: false,
  },
}];
const AddArgs = z.object({ a: z.number().int(), b: z.number().int() }).strict();
const input = [{ role: "user", content: "What is 2 + 3?" }];
const called = await client.responses.create({
  model, input, tools, tool_choice: "required", parallel_tool_calls: false,
  max_output_tokens: 200, temperature: 0.8,
});
const calls = called.output.filter((o) => o.type === "function_call");
assert.equal(calls.length, 1, JSON.stringify(called.output));
assert.equal(calls[0].name, "add");
assert.match(calls[0].call_id, /^call_/);
const args = AddArgs.parse(JSON.parse(calls[0].arguments));
input.push(calls[0]);
input.push({ type: "function_call_output", call_id: calls[0].call_id, output: JSON.stringify({ sum: args.a + args.b }) });
const answered = await client.responses.create({ model, input, tools, max_output_tokens: 8, temperature: 0 });
assert.ok(answered.output.length >= 1);
assert.ok(answered.usage.input_tokens > called.usage.input_tokens);

// A named tool, streamed: the call's arguments arrive as deltas and add up to the item's.
const callStream = client.responses.stream({
  model, input: [{ role: "user", content: "Add 4 and 5" }], tools,
  tool_choice: { type: "function", name: "add" }, parallel_tool_calls: false,
  max_output_tokens: 300, temperature: 0.8,
});
const argDeltas = {};
for await (const event of callStream) {
  if (event.type === "response.function_call_arguments.delta")
    argDeltas[event.output_index] = (argDeltas[event.output_index] || "") + event.delta;
}
const callFinal = await callStream.finalResponse();
const streamedCalls = callFinal.output.map((o, i) => [o, i]).filter(([o]) => o.type === "function_call");
assert.equal(streamedCalls.length, 1, JSON.stringify(callFinal.output));
for (const [call, i] of streamedCalls) {
  assert.equal(call.name, "add");
  assert.equal(call.arguments, argDeltas[i]);
  AddArgs.parse(JSON.parse(call.arguments));
}

// 4. Structured output through text.format.
// (a pattern, not max(): zod counts UTF-16 units, JSON Schema code points)
const Story = z.object({ title: z.string().regex(/^[a-z ]{1,20}$/), lines: z.number().int().min(1).max(9) }).strict();
const parsed = await client.responses.parse({
  model, input: "Write a story title", text: { format: zodTextFormat(Story, "story") },
  max_output_tokens: 120, temperature: 0.9,
});
assert.ok(parsed.output_parsed !== null, parsed.output_text);
Story.parse(parsed.output_parsed);

// 5. Embeddings: the client asks for base64 and decodes it; the floats are the same.
const emb = await client.embeddings.create({ model, input: ["Hello there", "General Kenobi"] });
assert.equal(emb.data.length, 2);
const raw = await fetch(`${process.env.TF_BASE_URL}/embeddings`, {
  method: "POST", headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ model, input: ["Hello there", "General Kenobi"], encoding_format: "float" }),
}).then((r) => r.json());
for (let i = 0; i < 2; i++) {
  assert.equal(emb.data[i].embedding.length, raw.data[i].embedding.length);
  emb.data[i].embedding.forEach((v, j) => assert.ok(Math.abs(v - raw.data[i].embedding[j]) < 1e-6));
}
await assert.rejects(client.embeddings.create({ model, input: "x", dimensions: 3 }), (e) => e.status === 400);

// 6. Prompt logprobs through completions' echo: the prompt's tokens come first, the first null.
const echoed = await client.completions.create({
  model, prompt: "Hello there, friend", echo: true, logprobs: 2, max_tokens: 3, temperature: 0,
});
const lp = echoed.choices[0].logprobs;
assert.ok(echoed.choices[0].text.startsWith("Hello there, friend"));
assert.equal(lp.token_logprobs[0], null);
assert.equal(lp.top_logprobs[0], null);
assert.equal(lp.tokens.length, echoed.usage.prompt_tokens + echoed.usage.completion_tokens);
assert.ok(lp.token_logprobs.slice(1).every((v) => typeof v === "number" && v <= 0));

console.log("all openai responses checks passed");
