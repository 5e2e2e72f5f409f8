// Drives `opal serve` with the official `openai` npm client: chat and legacy
// completions, streaming and not, usage, stop, seed, and a 401 for a bad key.
// Env: OPAL_BASE_URL (http://127.0.0.1:PORT/v1), OPAL_API_KEY, OPAL_MODEL.
// Exits non-zero with a message on the first failed check.
import OpenAI from "openai";
import { apiKey, baseURL, make_client, model } from "./client.mjs";
import assert from "node:assert/strict";

const client = make_client(60_000);
const messages = [{ role: "user", content: "Tell me a story about a cat." }];

async function main() {
  // models
  const models = await client.models.list();
  assert.equal(models.data[0].id, model);

  // chat, non-streaming
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.choices[0].message.role, "assistant");
  assert.ok(chat.choices[0].message.content.length > 0);
  assert.equal(chat.choices[0].finish_reason, "length");
  assert.equal(chat.usage.completion_tokens, 12);
  assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + 12);

  // chat, streaming with usage: same greedy text
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "";
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(finish, "length");
  assert.equal(usage?.completion_tokens, 12);

  // legacy completions, both ways
  const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 10, temperature: 0 });
  assert.equal(comp.object, "text_completion");
  assert.equal(comp.choices[0].finish_reason, "length");
  const cstream = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 10, temperature: 0, stream: true,
  });
  let ctext = "";
  for await (const chunk of cstream) for (const c of chunk.choices) ctext += c.text ?? "";
  assert.equal(ctext, comp.choices[0].text);

  // stop string ends the text before it
  const word = comp.choices[0].text.slice(4, 7);
  const stopped = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 10, temperature: 0, stop: [word],
  });
  assert.equal(stopped.choices[0].text, comp.choices[0].text.slice(0, comp.choices[0].text.indexOf(word)));
  assert.equal(stopped.choices[0].finish_reason, "stop");

  // seeds replay
  const s1 = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 1, seed: 7 });
  const s2 = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 1, seed: 7 });
  assert.equal(s1.choices[0].message.content, s2.choices[0].message.content);

  // bad request -> BadRequestError with the server's message
  await assert.rejects(
    client.chat.completions.create({ model, messages, max_tokens: "many" }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message),
  );
  // wrong key -> AuthenticationError
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model, messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
  console.log("openai client: all checks passed");
}

main().catch((e) => {
  console.error("openai client: FAILED:", e?.stack ?? e);
  process.exit(1);
});
