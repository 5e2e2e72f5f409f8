// Tool calls through the official `openai` client: tool_choice required / named
// (generated under a grammar, so the call always parses) with arguments that
// Ajv validates against each function's parameters, streamed delta.tool_calls (arguments in fragments),
// parallel_tool_calls false, the client's runTools() helper calling a local
// function, and role "tool" messages fed back. Env as openai_client.mjs.
import { make_client, model } from "./client.mjs";
import Ajv from "ajv";
import assert from "node:assert/strict";

const client = make_client(120_000);
const ajv = new Ajv({ strict: false });

const weatherParams = {
  type: "object",
  properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const addParams = {
  type: "object",
  properties: { a: { type: "integer" }, b: { type: "integer" } },
  required: ["a", "b"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: weatherParams } },
  { type: "function", function: { name: "add", description: "Adds two integers", parameters: addParams } },
];
const paramsOf = { get_weather: weatherParams, add: addParams };
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
let calls = 0;

function checkCall(tc, where) {
  assert.equal(tc.type, "function", where);
  assert.ok(tc.id && tc.id.startsWith("call_"), `${where}: id ${tc.id}`);
  const schema = paramsOf[tc.function.name];
  assert.ok(schema, `${where}: unknown function ${tc.function.name}`);
  const args = JSON.parse(tc.function.arguments);
  const v = ajv.compile(schema);
  assert.ok(v(args), `${where}: ${tc.function.name} ${tc.function.arguments}: ${ajv.errorsText(v.errors)}`);
  calls++;
  return args;
}

async function main() {
  // required: any of the tools, several seeds.
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: "required", seed, temperature: 1.0, max_tokens: 600,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.ok(c.message.tool_calls.length >= 1);
    for (const tc of c.message.tool_calls) checkCall(tc, `required seed ${seed}`);
  }
  // named + parallel_tool_calls false: exactly one call of that function.
  for (const seed of [6, 7, 8]) {
    const r = await client.chat.completions.create({
      model, messages, tools, seed, temperature: 1.0, max_tokens: 600, parallel_tool_calls: false,
      tool_choice: { type: "function", function: { name: "add" } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, "add");
    checkCall(c.message.tool_calls[0], `named seed ${seed}`);
  }
  // Streamed: delta.tool_calls chunks assemble into a valid call.
  const s = await client.chat.completions.create({
    model, messages, tools, seed: 9, temperature: 1.0, max_tokens: 600, stream: true,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const acc = [];
  const fragments = [];
  let finish = null;
  for await (const chunk of s) {
    for (const ch of chunk.choices) {
      for (const d of ch.delta?.tool_calls ?? []) {
        // As OpenAI streams: id and name in the call's first chunk, then arguments as they are generated.
        if (!acc[d.index]) assert.ok(d.id && d.function?.name, `first chunk of call ${d.index}: ${JSON.stringify(d)}`);
        else assert.ok(!d.id && !d.function?.name, `later chunk of call ${d.index}: ${JSON.stringify(d)}`);
        if (d.function?.arguments) fragments[d.index] = (fragments[d.index] ?? 0) + 1;
        acc[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
        if (d.id) acc[d.index].id = d.id;
        if (d.function?.name) acc[d.index].function.name += d.function.name;
        if (d.function?.arguments) acc[d.index].function.arguments += d.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(finish, "tool_calls");
  assert.ok(acc.length >= 1);
  for (const tc of acc) checkCall(tc, "stream");
  assert.ok(fragments[0] > 1, `the arguments came in ${fragments[0]} fragment(s), not as generated`);

  // The client's tool helper: runTools() parses the call, runs our function and
  // appends the role "tool" message (it stops after one call when tool_choice names a function).
  let ran = null;
  const runner = client.chat.completions.runTools({
    model, messages, seed: 10, temperature: 1.0, max_tokens: 600,
    tool_choice: { type: "function", function: { name: "add" } },
    tools: [{
      type: "function",
      function: { name: "add", parameters: addParams, parse: JSON.parse, function: (args) => { ran = args; return String(args.a + args.b); } },
    }],
  });
  await runner.done();
  assert.ok(runner.allChatCompletions().length >= 1);
  assert.ok(ran && Number.isInteger(ran.a) && Number.isInteger(ran.b), `runTools called add with ${JSON.stringify(ran)}`);
  const toolMsg = runner.messages.find((m) => m.role === "tool");
  assert.equal(toolMsg?.content, String(ran.a + ran.b));
  calls++;

  // Feed the call and its result back, then let the model answer (tool_choice none).
  const back = await client.chat.completions.create({
    model, max_tokens: 8, temperature: 0, tools, tool_choice: "none",
    messages: runner.messages,
  });
  assert.equal(back.choices[0].message.role, "assistant");
  assert.equal(back.choices[0].message.tool_calls, undefined);
  assert.ok(typeof back.choices[0].message.content === "string");

  // auto on a model that does not call tools: a plain reply.
  const auto = await client.chat.completions.create({ model, messages, tools, max_tokens: 6, temperature: 0 });
  assert.ok(["stop", "length", "tool_calls"].includes(auto.choices[0].finish_reason));

  // Bad requests name the field.
  await assert.rejects(
    client.chat.completions.create({ model, messages, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
    (e) => e.status === 400 && /nope/.test(e.message),
  );
  console.log(`tool calls: ${calls} calls validated; all checks passed`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
