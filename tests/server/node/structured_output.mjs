// Structured output through the official `openai` client: many JSON Schemas x
// seeds on /v1/chat/completions (response_format json_schema, strict, streamed
// and not) and /v1/completions, every output parsed and validated with Ajv;
// json_object; llama-server's /completion with `json_schema` and `grammar`;
// a schema Opal cannot compile -> 400 naming the construct.
// The model (stories260K) writes near-random text: only the grammar makes the
// output valid, so a validation failure is a grammar bug.
// Env: OPAL_BASE_URL (http://127.0.0.1:PORT/v1), OPAL_API_KEY, OPAL_MODEL.
import { apiKey, baseURL, make_client, model } from "./client.mjs";
import Ajv from "ajv";
import assert from "node:assert/strict";

const client = make_client(120_000);

const ajv = new Ajv({ strict: false, allErrors: true });
// The formats Opal's grammar produces (syntax only, as ajv-formats' "fast" mode).
ajv.addFormat("date", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/);
ajv.addFormat("time", /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/);
ajv.addFormat("date-time", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/);
ajv.addFormat("uuid", /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/);

// Every schema bounds its strings and arrays, so the grammar itself forces an end.
const S = (maxLength = 12) => ({ type: "string", maxLength });
const schemas = {
  person: {
    type: "object",
    properties: { name: S(), age: { type: "integer" }, email: S(), vip: { type: "boolean" } },
    required: ["name", "age"],
    additionalProperties: false,
  },
  all_optional: {
    type: "object",
    properties: { a: { type: "number" }, b: { type: "null" }, c: { enum: ["x", "y", 7, null] } },
    additionalProperties: false,
  },
  array_bounds: { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 4 },
  enums_const: {
    type: "object",
    properties: { color: { enum: ["red", "green", "blue"] }, version: { const: 3 }, tag: { const: "v" } },
    required: ["color", "version", "tag"],
    additionalProperties: false,
  },
  formats: {
    type: "object",
    properties: {
      day: { type: "string", format: "date" },
      at: { type: "string", format: "time" },
      stamp: { type: "string", format: "date-time" },
      id: { type: "string", format: "uuid" },
    },
    required: ["day", "at", "stamp", "id"],
    additionalProperties: false,
  },
  string_lengths: {
    type: "object",
    properties: { code: { type: "string", minLength: 3, maxLength: 5 }, note: { type: "string", maxLength: 0 } },
    required: ["code", "note"],
    additionalProperties: false,
  },
  refs_anyof: {
    $defs: {
      point: {
        type: "object",
        properties: { x: { type: "number" }, y: { type: "number" } },
        required: ["x", "y"],
        additionalProperties: false,
      },
    },
    type: "object",
    properties: {
      shape: { anyOf: [{ $ref: "#/$defs/point" }, { type: "array", items: { $ref: "#/$defs/point" }, maxItems: 2 }] },
      label: { type: ["string", "null"], maxLength: 6 },
    },
    required: ["shape", "label"],
    additionalProperties: false,
  },
  nested: {
    type: "object",
    properties: {
      user: {
        type: "object",
        properties: { id: { type: "integer" }, roles: { type: "array", items: { enum: ["admin", "dev"] }, maxItems: 3 } },
        required: ["id", "roles"],
        additionalProperties: false,
      },
      ok: { type: "boolean" },
    },
    required: ["user", "ok"],
    additionalProperties: false,
  },
  additional_schema: {
    type: "object",
    properties: { n: { type: "integer" } },
    required: ["n"],
    additionalProperties: { type: "boolean" },
  },
  one_of_types: { oneOf: [{ type: "integer" }, { type: "boolean" }, { type: "null" }] },
};

// Schemas whose grammar does not bound the length (free-form extra keys): an
// output cut by max_tokens is not checked, a finished one is.
const unbounded = new Set(["additional_schema"]);

const messages = [{ role: "user", content: "Give me the data as JSON." }];
let checked = 0;

function validate(name, text, where) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${where}: schema ${name}: output is not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
  const v = ajv.compile(schemas[name]);
  if (!v(value)) {
    throw new Error(`${where}: schema ${name}: ${ajv.errorsText(v.errors)} in ${JSON.stringify(text)}`);
  }
  checked++;
}

async function chatCase(name, seed, stream) {
  const req = {
    model, messages, seed, temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0, max_tokens: 900,
    response_format: { type: "json_schema", json_schema: { name, schema: schemas[name], strict: true } },
  };
  const where = `chat seed ${seed}${stream ? " stream" : ""}`;
  if (!stream) {
    const r = await client.chat.completions.create(req);
    if (unbounded.has(name) && r.choices[0].finish_reason === "length") return r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, "stop", `${where}: ${name}: ${JSON.stringify(r.choices[0])}`);
    validate(name, r.choices[0].message.content, where);
    return r.choices[0].message.content;
  }
  const s = await client.chat.completions.create({ ...req, stream: true });
  let text = "";
  let finish = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  if (unbounded.has(name) && finish === "length") return text;
  assert.equal(finish, "stop", `${where}: ${name}`);
  validate(name, text, where);
  return text;
}

async function main() {
  const names = Object.keys(schemas);
  const seeds = [1, 2, 3, 4, 5, 6];
  for (const name of names) {
    for (const seed of seeds) await chatCase(name, seed, false);
    // Streaming gives the same text as the non-streamed request with the same seed.
    const a = await chatCase(name, 7, false);
    const b = await chatCase(name, 7, true);
    assert.equal(b, a, `stream and non-stream differ for ${name}`);
  }
  // Greedy too (the argmax fast path).
  for (const name of names) {
    const r = await client.chat.completions.create({
      model, messages, temperature: 0, max_tokens: 900,
      response_format: { type: "json_schema", json_schema: { name, schema: schemas[name] } },
    });
    if (unbounded.has(name) && r.choices[0].finish_reason === "length") continue;
    assert.equal(r.choices[0].finish_reason, "stop");
    validate(name, r.choices[0].message.content, "greedy");
  }

  // Legacy completions with response_format.
  for (const seed of [11, 12, 13]) {
    const r = await client.completions.create({
      model, prompt: "Once upon a time", seed, temperature: 1.0, max_tokens: 900,
      response_format: { type: "json_schema", json_schema: { name: "person", schema: schemas.person } },
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    validate("person", r.choices[0].text, "completions");
  }

  // json_object: any JSON object (its length is not bounded, so only a stopped one is checked).
  let objects = 0;
  for (const seed of [21, 22, 23, 24]) {
    const r = await client.chat.completions.create({
      model, messages, seed, temperature: 1.0, max_tokens: 300, response_format: { type: "json_object" },
    });
    const text = r.choices[0].message.content;
    assert.equal(text.trimStart()[0], "{", `json_object output starts with ${JSON.stringify(text.slice(0, 10))}`);
    if (r.choices[0].finish_reason === "stop") {
      const v = JSON.parse(text);
      assert.equal(typeof v, "object");
      assert.ok(v !== null && !Array.isArray(v));
      objects++;
    } else {
      assert.equal(r.choices[0].finish_reason, "length");
    }
  }

  // A schema Opal cannot compile: 400 naming the construct.
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 5,
      response_format: { type: "json_schema", json_schema: { name: "p", schema: { type: "string", pattern: "^a+$" } } },
    }),
    (e) => e.status === 400 && /pattern/.test(e.message),
  );

  // llama-server's /completion: json_schema and grammar.
  const root = baseURL.replace(/\/v1$/, "");
  const post = async (body) => {
    const r = await fetch(`${root}/completion`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: await r.json() };
  };
  for (const seed of [31, 32]) {
    const r = await post({ prompt: "Hi", seed, temperature: 1.0, n_predict: 900, json_schema: schemas.nested });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.stop_type, "eos", JSON.stringify(r.body));
    validate("nested", r.body.content, "/completion");
  }
  const g = await post({ prompt: "Hi", seed: 5, temperature: 1.0, n_predict: 100, grammar: 'root ::= ("yes" | "no") "!"' });
  assert.equal(g.status, 200);
  assert.ok(["yes!", "no!"].includes(g.body.content), JSON.stringify(g.body));
  const bad = await post({ prompt: "Hi", n_predict: 5, grammar: "root ::= undefined-rule" });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /undefined-rule/);

  console.log(`structured output: ${checked} outputs validated, ${objects} json_object outputs parsed; all checks passed`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
