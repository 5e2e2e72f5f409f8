// The `openai` client every test script here uses, configured from the
// environment the C++ tests set: OPAL_BASE_URL (http://127.0.0.1:PORT/v1),
// OPAL_API_KEY, OPAL_MODEL. Exits 2 when OPAL_BASE_URL is missing.
import OpenAI from "openai";

export const baseURL = process.env.OPAL_BASE_URL;
export const apiKey = process.env.OPAL_API_KEY ?? "none";
export const model = process.env.OPAL_MODEL ?? "stories";
if (!baseURL) {
  console.error("OPAL_BASE_URL is not set");
  process.exit(2);
}

export function make_client(timeout_ms) {
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: timeout_ms });
}
