// Embeddings through the official `openai` client: embeddings.create with the
// client's default (it asks for base64 and decodes it), encoding_format
// "float" and "base64" (decoded here), each vector checked against llama.cpp's
// llama-embedding vectors in OPAL_GOLDEN (cosine >= OPAL_MIN_COSINE); usage
// counts; token-id and array-of-arrays inputs; a too-long input is a 400
// naming it; and chat answers from the same server. Env as client.mjs, plus
// OPAL_GOLDEN (a ../shared/golden/embeddings file matching the served model
// and its --pooling) and OPAL_MIN_COSINE.
import { make_client, model } from "./client.mjs";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const client = make_client(60_000);
const golden = JSON.parse(readFileSync(process.env.OPAL_GOLDEN, "utf8")).data.map((d) => d.embedding);
const minCosine = Number(process.env.OPAL_MIN_COSINE ?? "0.9999");
const texts = [
  "The quick brown fox jumps over the lazy dog.",
  "Once upon a time, there was a little robot.",
  "Embeddings map text to vectors; similar texts land close together.",
];
let checks = 0;

function cosine(a, b) {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}

function checkGolden(vectors, where) {
  assert.equal(vectors.length, golden.length, where);
  vectors.forEach((v, i) => {
    assert.equal(v.length, golden[i].length, `${where} ${i}: dimension`);
    const c = cosine(Array.from(v), golden[i]);
    assert.ok(c >= minCosine, `${where} ${i}: cosine ${c} < ${minCosine}`);
    console.log(`${where} text ${i}: cosine ${c.toFixed(7)}`);
    ++checks;
  });
}

// 1. The client's default: base64 on the wire, decoded by the client.
const dflt = await client.embeddings.create({ model, input: texts });
assert.equal(dflt.object, "list");
assert.equal(dflt.model, model);
dflt.data.forEach((d, i) => assert.equal(d.index, i));
checkGolden(dflt.data.map((d) => d.embedding), "default");
const usage = dflt.usage;
assert.ok(usage.prompt_tokens > texts.length && usage.total_tokens === usage.prompt_tokens, JSON.stringify(usage));

// 2. float.
const asFloat = await client.embeddings.create({ model, input: texts, encoding_format: "float" });
checkGolden(asFloat.data.map((d) => d.embedding), "float");
assert.deepEqual(asFloat.usage, usage);

// 3. base64, decoded here: little-endian float32, the same numbers as float.
const asB64 = await client.embeddings.create({ model, input: texts, encoding_format: "base64" });
const decoded = asB64.data.map((d) => {
  assert.equal(typeof d.embedding, "string");
  const b = Buffer.from(d.embedding, "base64");
  return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
});
checkGolden(decoded, "base64");
decoded.forEach((v, i) => v.forEach((x, e) => assert.equal(x, Math.fround(asFloat.data[i].embedding[e]))));

// 4. One string; its usage is its share of the three.
let sum = 0;
for (let i = 0; i < texts.length; ++i) {
  const one = await client.embeddings.create({ model, input: texts[i], encoding_format: "float" });
  assert.equal(one.data.length, 1);
  assert.ok(cosine(one.data[0].embedding, golden[i]) >= minCosine, `single ${i}`);
  sum += one.usage.prompt_tokens;
  ++checks;
}
assert.equal(sum, usage.prompt_tokens);

// 5. Token ids (one input) and arrays of token ids (one input each), from /tokenize.
const root = new URL("..", client.baseURL.endsWith("/") ? client.baseURL : client.baseURL + "/").href;
const tokens = [];
for (const t of texts) {
  const r = await fetch(root + "tokenize", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${client.apiKey}` },
    body: JSON.stringify({ content: t, add_special: true, parse_special: true }),
  });
  tokens.push((await r.json()).tokens);
}
const ids = await client.embeddings.create({ model, input: tokens[0], encoding_format: "float" });
assert.equal(ids.data.length, 1);
assert.ok(cosine(ids.data[0].embedding, golden[0]) >= minCosine, "token ids");
const arrays = await client.embeddings.create({ model, input: tokens, encoding_format: "float" });
checkGolden(arrays.data.map((d) => d.embedding), "token arrays");

// 6. An input longer than a slot's context: 400 naming it.
try {
  await client.embeddings.create({ model, input: ["short", "word ".repeat(1500)] });
  assert.fail("a too-long input was accepted");
} catch (e) {
  assert.equal(e.status, 400, String(e));
  assert.match(e.message, /'input\[1\]' has \d+ tokens, more than the context holds/);
  ++checks;
}

// 7. The same server answers chat.
const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hi" }],
  max_tokens: 4,
});
assert.ok(chat.choices[0].message.content !== undefined);
++checks;

console.log(`${checks} checks, all checks passed`);
