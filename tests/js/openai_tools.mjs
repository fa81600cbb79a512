// The official openai npm client against tokenflow's tools and structured output (issue 24):
// a manual tool loop (call, run, answer with the result), the same call streamed through the
// client's stream helper, runTools with a named function, and chat.completions.parse with a
// zod schema through zodResponseFormat. Env: TF_BASE_URL, TF_MODEL (a model whose template
// renders tools and tool results, e.g. Qwen2.5's).
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const client = new OpenAI({ baseURL: process.env.TF_BASE_URL, apiKey: "unused" });
const model = process.env.TF_MODEL;

const AddArgs = z.object({ a: z.number().int().min(-99).max(99), b: z.number().int().min(-99).max(99) }).strict();
const WeatherArgs = z.object({ city: z.string().min(1).max(16), unit: z.enum(["celsius", "fahrenheit"]) }).strict();
const tools = [
  {
    type: "function",
    function: {
      name: "add",
      description: "Adds two integers",
      parameters: {
        type: "object",
        properties: { a: { type: "integer", minimum: -99, maximum: 99 }, b: { type: "integer", minimum: -99, maximum: 99 } },
        required: ["a", "b"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string", minLength: 1, maxLength: 16 }, unit: { enum: ["celsius", "fahrenheit"] } },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
];
const argsSchema = { add: AddArgs, get_weather: WeatherArgs };

// 1. A manual loop: the model must call a tool; its arguments follow the schema; the result
// goes back as a tool message and the model answers.
const messages = [{ role: "user", content: "What is 2 + 3?" }];
const first = await client.chat.completions.create({
  model, messages, tools, tool_choice: "required", parallel_tool_calls: false,
  max_tokens: 200, temperature: 0.8, seed: 4,
});
const choice = first.choices[0];
assert.equal(choice.finish_reason, "tool_calls");
assert.equal(choice.message.content, null);
assert.equal(choice.message.tool_calls.length, 1);
const call = choice.message.tool_calls[0];
assert.match(call.id, /^call_/);
assert.equal(call.type, "function");
const args = argsSchema[call.function.name].parse(JSON.parse(call.function.arguments));
messages.push(choice.message);
messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ result: args.a !== undefined ? args.a + args.b : "sunny" }) });
const second = await client.chat.completions.create({ model, messages, tools, tool_choice: "none", max_tokens: 8, temperature: 0 });
assert.equal(typeof second.choices[0].message.content, "string");
assert.equal(second.choices[0].message.tool_calls, undefined);

// 2. The same first call streamed: the client's helper assembles the tool-call deltas into the
// same call.
const stream = client.chat.completions.stream({
  model, messages: messages.slice(0, 1), tools, tool_choice: "required", parallel_tool_calls: false,
  max_tokens: 200, temperature: 0.8, seed: 4,
});
const streamed = await stream.finalChatCompletion();
assert.equal(streamed.choices[0].finish_reason, "tool_calls");
const sc = streamed.choices[0].message.tool_calls[0];
assert.equal(sc.function.name, call.function.name);
assert.deepEqual(JSON.parse(sc.function.arguments), JSON.parse(call.function.arguments));

// 3. runTools with a named function: the client runs our function on the parsed arguments.
let ran = null;
const runner = client.chat.completions.runTools({
  model, messages: [{ role: "user", content: "Add 4 and 5." }], max_tokens: 200, temperature: 0.5, seed: 7,
  tool_choice: { type: "function", function: { name: "add" } },
  tools: [{
    type: "function",
    function: {
      name: "add",
      parameters: tools[0].function.parameters,
      parse: (s) => AddArgs.parse(JSON.parse(s)),
      function: (a) => { ran = a; return String(a.a + a.b); },
    },
  }],
});
await runner.done();
assert.ok(ran, "runTools ran the tool");
const toolMessage = runner.messages.find((m) => m.role === "tool");
assert.equal(toolMessage.content, String(ran.a + ran.b));

// 4. chat.completions.parse with a zod schema.
const Person = z.object({
  name: z.string().min(1).max(12),
  age: z.number().int().min(0).max(120),
  pets: z.array(z.enum(["cat", "dog"])).max(3),
});
const parsed = await client.chat.completions.parse({
  model, messages: [{ role: "user", content: "Describe a person." }],
  response_format: zodResponseFormat(Person, "person"), max_tokens: 300, temperature: 1.0, seed: 3,
});
const person = parsed.choices[0].message.parsed;
assert.ok(person, "parsed");
Person.parse(person);

console.log("all openai tools checks passed");
